//! The lifetimes every credential shares, whichever module mints or signs it.

/// A credential's lifetime when none is asked for.
pub const DEFAULT_TTL_SECS: i64 = 300;
/// The longest lifetime of any credential or token acp issues (opaque or JWT, minted or
/// exchanged).
pub const MAX_TTL_SECS: i64 = 3600;
