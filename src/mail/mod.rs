//! Email delivery, shared by magic links, approval links, policy-gated sending and contact
//! notifications. The provider is chosen by `ACP_EMAIL_URL`:
//!
//! - `outbox` (default): messages are stored in the database and read with `acp outbox list`,
//!   so a laptop needs no mail server;
//! - `smtp://[user:pass@]host:port[?tls=none|starttls|tls]`: a real relay through lettre.
//!
//! A failure is an error the caller sees; mail is never dropped silently.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lettre::message::{header::ContentType, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::ids;
use crate::store::{apply_one, Change, Op, OutboxAttachment, OutboxMessage, Store};
use crate::time::now_ms;

/// A message to deliver. At least one of `text` and `html`. Recipients are mailboxes as RFC 5322
/// writes them: `jane@example.com` or `Jane Doe <jane@example.com>`.
#[derive(Debug, Clone, Default)]
pub struct Email {
    pub to: Vec<String>,
    pub cc: Vec<String>,
    pub bcc: Vec<String>,
    pub subject: String,
    pub text: Option<String>,
    pub html: Option<String>,
    /// Files delivered with the message, in order.
    pub attachments: Vec<Attachment>,
}

/// A file delivered with a message.
#[derive(Clone, PartialEq, Eq)]
pub struct Attachment {
    pub filename: String,
    /// A MIME type lettre's `ContentType::parse` accepts, e.g. `application/pdf`.
    pub content_type: String,
    pub content: Vec<u8>,
}

impl std::fmt::Debug for Attachment {
    // The content is the sender's data: debug output names the file, not what it holds.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attachment")
            .field("filename", &self.filename)
            .field("content_type", &self.content_type)
            .field("size_bytes", &self.content.len())
            .finish()
    }
}

impl Email {
    /// Every recipient: to, cc, then bcc.
    pub fn recipients(&self) -> impl Iterator<Item = &String> {
        self.to.iter().chain(&self.cc).chain(&self.bcc)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MailError {
    /// The message itself is unusable (bad address, no body).
    #[error("{0}")]
    Invalid(String),
    /// The provider refused or could not be reached.
    #[error("the email provider failed: {0}")]
    Provider(String),
}

#[async_trait]
pub trait Mailer: Send + Sync {
    /// The provider's name as reported in responses (`outbox`, `smtp`).
    fn provider(&self) -> &'static str;
    /// Delivers the message; answers the provider's message id.
    async fn send(&self, email: &Email) -> Result<String, MailError>;
    /// A cheap reachability check for the status page.
    async fn check(&self) -> Result<(), MailError>;
}

/// Stores messages in the database.
pub struct Outbox {
    store: Arc<dyn Store>,
}

#[async_trait]
impl Mailer for Outbox {
    fn provider(&self) -> &'static str {
        "outbox"
    }

    async fn send(&self, email: &Email) -> Result<String, MailError> {
        check_email(email)?;
        let id = ids::new_id("msg");
        let recipients: Vec<String> = email.recipients().cloned().collect();
        let message = OutboxMessage {
            id: id.clone(),
            recipients,
            subject: email.subject.clone(),
            text_body: email.text.clone(),
            html_body: email.html.clone(),
            attachments: email
                .attachments
                .iter()
                .map(|a| OutboxAttachment {
                    filename: a.filename.clone(),
                    content_type: a.content_type.clone(),
                    content: a.content.clone(),
                })
                .collect(),
            created_at: now_ms(),
        };
        apply_one(
            self.store.as_ref(),
            Change::new(Op::StoreOutboxMessage(message)),
        )
        .await
        .map_err(|e| MailError::Provider(e.to_string()))?;
        // The body may hold a login link: say where it is, not what it says.
        tracing::info!(message_id = %id, recipients = email.recipients().count(),
            "email stored in the outbox; read it with `acp outbox list`");
        Ok(id)
    }

    async fn check(&self) -> Result<(), MailError> {
        self.store
            .ping()
            .await
            .map_err(|e| MailError::Provider(e.to_string()))
    }
}

/// Delivers through an SMTP relay.
pub struct Smtp {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
}

#[async_trait]
impl Mailer for Smtp {
    fn provider(&self) -> &'static str {
        "smtp"
    }

    async fn send(&self, email: &Email) -> Result<String, MailError> {
        check_email(email)?;
        let message_id = format!("<{}@acp>", ids::new_id("msg"));
        let mut builder = Message::builder()
            .from(self.from.clone())
            .subject(email.subject.clone())
            .message_id(Some(message_id.clone()));
        let parse = |a: &String| {
            a.parse::<Mailbox>()
                .map_err(|_| MailError::Invalid(format!("`{a}` is not an email address")))
        };
        for a in &email.to {
            builder = builder.to(parse(a)?);
        }
        for a in &email.cc {
            builder = builder.cc(parse(a)?);
        }
        for a in &email.bcc {
            builder = builder.bcc(parse(a)?);
        }
        let message = if email.attachments.is_empty() {
            match body_part(email) {
                Body::Single(part) => builder.singlepart(part),
                Body::Multi(part) => builder.multipart(part),
            }
        } else {
            // multipart/mixed: the body first, then each file.
            let mixed = MultiPart::mixed();
            let mut mixed = match body_part(email) {
                Body::Single(part) => mixed.singlepart(part),
                Body::Multi(part) => mixed.multipart(part),
            };
            for a in &email.attachments {
                let content_type = ContentType::parse(&a.content_type).map_err(|_| {
                    MailError::Invalid(format!("`{}` is not a content type", a.content_type))
                })?;
                mixed = mixed.singlepart(
                    lettre::message::Attachment::new(a.filename.clone())
                        .body(a.content.clone(), content_type),
                );
            }
            builder.multipart(mixed)
        }
        .map_err(|e| MailError::Invalid(e.to_string()))?;
        self.transport
            .send(message)
            .await
            .map_err(|e| MailError::Provider(e.to_string()))?;
        Ok(message_id)
    }

    async fn check(&self) -> Result<(), MailError> {
        match self.transport.test_connection().await {
            Ok(true) => Ok(()),
            Ok(false) => Err(MailError::Provider("the relay did not answer".into())),
            Err(e) => Err(MailError::Provider(e.to_string())),
        }
    }
}

/// The text and/or html body of a message, as one MIME part.
enum Body {
    Single(SinglePart),
    Multi(MultiPart),
}

fn body_part(email: &Email) -> Body {
    match (&email.text, &email.html) {
        (Some(text), Some(html)) => Body::Multi(MultiPart::alternative_plain_html(
            text.clone(),
            html.clone(),
        )),
        (None, Some(html)) => Body::Single(
            SinglePart::builder()
                .header(ContentType::TEXT_HTML)
                .body(html.clone()),
        ),
        (text, None) => Body::Single(
            SinglePart::builder()
                .header(ContentType::TEXT_PLAIN)
                .body(text.clone().unwrap_or_default()),
        ),
    }
}

fn check_email(email: &Email) -> Result<(), MailError> {
    if email.recipients().next().is_none() {
        return Err(MailError::Invalid(
            "an email needs at least one recipient".into(),
        ));
    }
    if email.text.is_none() && email.html.is_none() {
        return Err(MailError::Invalid(
            "an email needs a text or html body".into(),
        ));
    }
    for a in &email.attachments {
        if a.filename.is_empty() || ContentType::parse(&a.content_type).is_err() {
            return Err(MailError::Invalid(
                "an attachment needs a file name and a valid content type".into(),
            ));
        }
    }
    Ok(())
}

/// Percent-decoding for the user and password of the URL.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(v) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Builds the mailer named by `url` (`outbox` or `smtp://...`), sending from `from`.
pub fn from_url(url: &str, from: &str, store: Arc<dyn Store>) -> Result<Arc<dyn Mailer>, String> {
    if url == "outbox" {
        return Ok(Arc::new(Outbox { store }));
    }
    let Some(rest) = url.strip_prefix("smtp://") else {
        return Err(format!(
            "`ACP_EMAIL_URL` must be `outbox` or `smtp://...`, got `{}`",
            crate::app::redact_url(url)
        ));
    };
    let (authority, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = authority.trim_end_matches('/');
    let (credentials, host_port) = match authority.rsplit_once('@') {
        Some((creds, hp)) => (Some(creds), hp),
        None => (None, authority),
    };
    let (host, port) = match host_port.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .map_err(|_| format!("invalid SMTP port `{p}`"))?,
        ),
        None => (host_port, 587),
    };
    if host.is_empty() {
        return Err("the SMTP URL needs a host".into());
    }
    let mut tls_mode = "starttls";
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("tls", mode @ ("none" | "starttls" | "tls"))) => tls_mode = mode,
            _ => {
                return Err(format!(
                    "unknown SMTP URL parameter `{pair}` (use tls=none|starttls|tls)"
                ))
            }
        }
    }
    let tls = match tls_mode {
        "none" => Tls::None,
        mode => {
            let params = TlsParameters::new(host.to_owned())
                .map_err(|e| format!("TLS setup for `{host}`: {e}"))?;
            if mode == "tls" {
                Tls::Wrapper(params)
            } else {
                Tls::Required(params)
            }
        }
    };
    let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
        .port(port)
        .tls(tls)
        .timeout(Some(Duration::from_secs(10)));
    if let Some(creds) = credentials {
        let (user, pass) = creds.split_once(':').unwrap_or((creds, ""));
        builder = builder.credentials(Credentials::new(percent_decode(user), percent_decode(pass)));
    }
    let from: Mailbox = from
        .parse()
        .map_err(|_| format!("`ACP_EMAIL_FROM` is not an email address: `{from}`"))?;
    Ok(Arc::new(Smtp {
        transport: builder.build(),
        from,
    }))
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn percent_decoding_of_credentials() {
        assert_eq!(percent_decode("p%40ss%3Aword"), "p@ss:word");
        assert_eq!(percent_decode("plain"), "plain");
        assert_eq!(percent_decode("trail%4"), "trail%4");
    }
}
