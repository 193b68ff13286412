//! The MCP gateway: a workspace's MCP servers fronted by acp, so that every tool call an agent
//! makes through `/mcp/{name}` is a decision, an approval or a refusal, and the upstream's
//! credentials stay in the vault: the registered servers ([`servers`]) and the gateway itself
//! ([`gateway`]).

pub mod gateway;
pub mod servers;
