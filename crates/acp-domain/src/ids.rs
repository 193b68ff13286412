//! Prefixed, sortable identifiers: `ws_`, `key_`, `agt_`, `ch_`, `evt_`, ... followed by the
//! 32 hex digits of a UUIDv7, so that ids sort by creation time.

use uuid::Uuid;

pub const WORKSPACE: &str = "ws";
pub const API_KEY: &str = "key";
pub const AGENT: &str = "agt";
pub const CHALLENGE: &str = "ch";
pub const EVENT: &str = "evt";
pub const HEARTBEAT: &str = "hb";
pub const TRACE: &str = "trc";

/// A new id with the given prefix, for example `agt_0193a4...`.
pub fn new_id(prefix: &str) -> String {
    let mut buf = [0u8; uuid::fmt::Simple::LENGTH];
    let hex = Uuid::now_v7().simple().encode_lower(&mut buf);
    let mut id = String::with_capacity(prefix.len() + 1 + hex.len());
    id.push_str(prefix);
    id.push('_');
    id.push_str(hex);
    id
}

/// True when `id` has the shape of an id with this prefix. Used to answer malformed ids as
/// unknown without a database round trip.
pub fn has_shape(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('_'))
        .is_some_and(|body| body.len() == 32 && body.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefixed_sortable_and_recognised() {
        let a = new_id(AGENT);
        let b = new_id(AGENT);
        assert!(a.starts_with("agt_"));
        assert!(a < b);
        assert!(has_shape(&a, AGENT));
        assert!(!has_shape(&a, WORKSPACE));
        assert!(!has_shape("agt_xyz", AGENT));
    }
}
