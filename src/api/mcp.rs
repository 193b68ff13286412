//! The MCP gateway: registered servers.

use super::*;

/// Where the gateway takes an upstream's credentials from: a vault secret set's proxy profile,
/// whose header or query templates are filled on every request to the upstream.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct McpServerAuthRequest {
    #[schema(schema_with = secret_set_ref)]
    pub secret_set_id: Value,
    /// A profile of that set whose `hosts` cover the server's host.
    pub profile: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct McpServerAuth {
    /// `ss_...`
    pub secret_set_id: String,
    pub profile: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreateMcpServerRequest {
    /// 1 to 64 of `a-z`, `0-9` and `-`, unique in the workspace: agents reach the server at
    /// `/mcp/{name}` and its tools are the actions `mcp.{name}.{tool}`.
    #[schema(min_length = 1, max_length = 64, pattern = "^[a-z0-9-]{1,64}$")]
    pub name: String,
    /// The upstream's Streamable HTTP endpoint: `https://`, a public address unless the
    /// operator's allow-list opens it.
    #[schema(max_length = 2048, pattern = "^https://")]
    pub url: String,
    #[serde(default)]
    pub auth: Option<McpServerAuthRequest>,
    /// Record tool calls' argument values in their audit events (names and JSON types are
    /// always recorded). Default `false`.
    #[serde(default)]
    pub record_arguments: Option<bool>,
}

/// Changes to a server; an absent field stays as it is.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct UpdateMcpServerRequest {
    #[serde(default)]
    #[schema(min_length = 1, max_length = 64, pattern = "^[a-z0-9-]{1,64}$")]
    pub name: Option<String>,
    #[serde(default)]
    #[schema(max_length = 2048, pattern = "^https://")]
    pub url: Option<String>,
    /// `null` removes the upstream authentication.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<McpServerAuthRequest>, nullable)]
    pub auth: Option<Option<McpServerAuthRequest>>,
    #[serde(default)]
    pub record_arguments: Option<bool>,
}

/// A registered MCP server.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct McpServer {
    /// `mcp_...`
    pub server_id: String,
    pub name: String,
    /// The upstream's endpoint.
    pub url: String,
    /// Where agents connect: `<public url>/mcp/{name}`.
    pub endpoint: String,
    pub auth: Option<McpServerAuth>,
    pub record_arguments: bool,
    pub created_at: String,
    pub created_by: String,
    /// The name of who registered it, when that is a person or key still known.
    pub created_by_name: Option<String>,
    pub updated_at: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct McpServerResponse {
    pub ok: bool,
    pub server: McpServer,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct McpServerList {
    pub ok: bool,
    pub items: Vec<McpServer>,
}
