//! The MCP gateway: a workspace's MCP servers fronted by acp, so that every tool call an agent
//! makes through `/mcp/{name}` is a decision, an approval or a refusal, and the upstream's
//! credentials stay in the vault. This module holds the registered servers
//! ([`servers`]).

pub mod servers;
