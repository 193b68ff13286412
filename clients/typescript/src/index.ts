// Agent client for acp, the agent control plane.
//
// `Agent` holds an agent's Ed25519 key and signs its requests (heartbeats, the vault's agent
// side, challenge status); `Backend` holds a workspace API key (checks, verification, token
// exchange, credentials, workflow leases). Every error answer throws `AcpError`.

export { Agent, type AgentOptions, type CreateOptions, type KeyFile, type SecretSetId, type WaitOptions } from "./agent.js";
export { Backend, type ReceivedHeaders } from "./backend.js";
export { AcpError, type ChallengeLink } from "./errors.js";
export {
  bodySha256,
  canonicalString,
  encodeJson,
  loadPrivateKey,
  signedPath,
  type Body,
  type SignatureHeaders,
  type SignOptions,
} from "./signing.js";
export {
  Decision,
  Verification,
  type Credential,
  type ExchangedToken,
  type Heartbeat,
  type HeartbeatAnswer,
  type Introspection,
  type PolicyChallenge,
  type ProxyAnswer,
  type RequestLease,
  type WorkflowLease,
} from "./types.js";
