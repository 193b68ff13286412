//! What every use case needs at run time: the store for reads, the group-commit writer for
//! changes, and the resolved configuration.

use std::sync::Arc;

use crate::config::Config;
use crate::mail::Mailer;
use crate::store::{GroupCommit, Store};

pub struct Context {
    pub store: Arc<dyn Store>,
    pub writer: GroupCommit,
    pub config: Config,
    /// The configured email provider.
    pub mailer: Arc<dyn Mailer>,
    /// Base URL for links (`ACP_PUBLIC_URL`, else the address the server listens on).
    pub public_url: String,
}

pub type SharedContext = Arc<Context>;
