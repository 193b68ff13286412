//! Email delivery, shared by magic links, approval links, policy-gated sending and contact
//! notifications. The provider is chosen by `ACP_EMAIL_URL`:
//!
//! - `outbox` (default): messages are stored in the database and read with `acp admin outbox list`,
//!   so a laptop needs no mail server;
//! - `smtp://[user:pass@]host:port[?tls=none|starttls|tls]`: a real relay through lettre.
//!
//! A failure is an error the caller sees; mail is never dropped silently.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lettre::message::{header::ContentType, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::domain::ids;
use crate::store::{apply_one, Change, EmailOp, OutboxAttachment, OutboxMessage, Store};
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
        counted(self.provider(), self.store_message(email).await)
    }

    async fn check(&self) -> Result<(), MailError> {
        self.store
            .ping()
            .await
            .map_err(|e| MailError::Provider(e.to_string()))
    }
}

impl Outbox {
    async fn store_message(&self, email: &Email) -> Result<String, MailError> {
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
            Change::new(EmailOp::StoreOutboxMessage(message)),
        )
        .await
        .map_err(|e| MailError::Provider(e.to_string()))?;
        // The body may hold a login link: say where it is, not what it says.
        tracing::info!(message_id = %id, recipients = email.recipients().count(),
            "email stored in the outbox; read it with `acp admin outbox list`");
        Ok(id)
    }
}

/// Counts a delivery's outcome in the mail metrics, and answers it.
fn counted(provider: &'static str, sent: Result<String, MailError>) -> Result<String, MailError> {
    match &sent {
        Ok(_) => crate::observe::mail_sent(provider),
        Err(MailError::Invalid(_)) => crate::observe::mail_failed(provider, "invalid"),
        Err(MailError::Provider(_)) => crate::observe::mail_failed(provider, "provider"),
    }
    sent
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
        counted(self.provider(), self.deliver(email).await)
    }

    async fn check(&self) -> Result<(), MailError> {
        match self.transport.test_connection().await {
            Ok(true) => Ok(()),
            Ok(false) => Err(MailError::Provider("the relay did not answer".into())),
            Err(e) => Err(MailError::Provider(e.to_string())),
        }
    }
}

impl Smtp {
    async fn deliver(&self, email: &Email) -> Result<String, MailError> {
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

/// The TLS of `ACP_EMAIL_URL`'s `tls=` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TlsMode {
    None,
    StartTls,
    Tls,
}

/// Our SMTP URL in lettre's syntax, for `AsyncSmtpTransport::from_url`.
///
/// Ours, as documented: `smtp://[user:pass@]host[:port][?tls=none|starttls|tls]`, STARTTLS
/// and port 587 unless it says otherwise. lettre reads `smtp://` as plain SMTP on port 25,
/// `smtp://...?tls=required` as STARTTLS and `smtps://` as TLS from the first byte (port 465).
/// So the port is always written out, and `tls=` becomes lettre's scheme and parameter.
/// Also answers the user name when it comes without a password: lettre then sets no
/// credentials, ours authenticates with an empty password.
fn lettre_url(url: &str) -> Result<(String, Option<String>), String> {
    let wrong_scheme = || {
        format!(
            "`ACP_EMAIL_URL` must be `outbox` or `smtp://...`, got `{}`",
            crate::secret::redact_url(url)
        )
    };
    if !url.starts_with("smtp://") {
        return Err(wrong_scheme());
    }
    let mut parsed = url::Url::parse(url).map_err(|e| {
        format!(
            "`ACP_EMAIL_URL` is not a URL ({e}): `{}`",
            crate::secret::redact_url(url)
        )
    })?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("the SMTP URL needs a host".into());
    }
    if !matches!(parsed.path(), "" | "/") {
        return Err("the SMTP URL takes no path".into());
    }
    let mut mode = TlsMode::StartTls;
    for (key, value) in parsed.query_pairs() {
        mode = match (key.as_ref(), value.as_ref()) {
            ("tls", "none") => TlsMode::None,
            ("tls", "starttls") => TlsMode::StartTls,
            ("tls", "tls") => TlsMode::Tls,
            _ => {
                return Err(format!(
                    "unknown SMTP URL parameter `{key}={value}` (use tls=none|starttls|tls)"
                ))
            }
        };
    }
    let port = parsed.port().unwrap_or(587);
    let user_alone = (parsed.password().is_none() && !parsed.username().is_empty())
        .then(|| percent_decode(parsed.username()));
    parsed
        .set_port(Some(port))
        .map_err(|()| "the SMTP URL needs a host".to_owned())?;
    parsed.set_path("");
    parsed.set_query(match mode {
        TlsMode::StartTls => Some("tls=required"),
        TlsMode::None | TlsMode::Tls => None,
    });
    if mode == TlsMode::Tls {
        parsed.set_scheme("smtps").map_err(|()| wrong_scheme())?;
    }
    Ok((parsed.into(), user_alone))
}

/// Percent-decoding of the URL's user name (lettre decodes the user and password it reads).
fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// Builds the mailer named by `url` (`outbox` or `smtp://...`), sending from `from`.
pub fn from_url(url: &str, from: &str, store: Arc<dyn Store>) -> Result<Arc<dyn Mailer>, String> {
    if url == "outbox" {
        return Ok(Arc::new(Outbox { store }));
    }
    Ok(Arc::new(Smtp::from_url(url, from)?))
}

impl Smtp {
    /// The SMTP mailer of an `smtp://` URL (see [`lettre_url`]).
    fn from_url(url: &str, from: &str) -> Result<Smtp, String> {
        let (lettre_url, user_alone) = lettre_url(url)?;
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::from_url(&lettre_url)
            .map_err(|e| format!("`ACP_EMAIL_URL` `{}`: {e}", crate::secret::redact_url(url)))?
            .timeout(Some(Duration::from_secs(10)));
        if let Some(user) = user_alone {
            builder = builder.credentials(Credentials::new(user, String::new()));
        }
        let from: Mailbox = from
            .parse()
            .map_err(|_| format!("`ACP_EMAIL_FROM` is not an email address: `{from}`"))?;
        Ok(Smtp {
            transport: builder.build(),
            from,
        })
    }
}

/// The address of one recipient entry as written (`jane@example.com` or
/// `Jane Doe <jane@example.com>`), read by lettre's parser, the one messages are sent with, so
/// that a policy judges the address a message goes to. Anything it does not read as one mailbox
/// (a list in one entry, say) is kept as written, to be refused by the one-address check of the
/// policy's email facts. This is the reader the service gives the policy engine.
pub fn address_of(entry: &str) -> String {
    let entry = entry.trim();
    match <Mailbox as std::str::FromStr>::from_str(entry) {
        Ok(mailbox) if entry.ends_with('>') => mailbox.email.to_string(),
        _ => entry.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recipient_with_a_display_name_is_read_by_its_address() {
        assert_eq!(
            address_of(" Jane Doe <jane@example.com> "),
            "jane@example.com"
        );
        assert_eq!(
            address_of("\"Doe, John\" <john@gmail.com>"),
            "john@gmail.com"
        );
        assert_eq!(address_of("bob@Example.org"), "bob@Example.org");
        // A list in one entry is not one mailbox: kept as written, for the policy's
        // one-address check to refuse.
        for list in [
            "a@example.com, b@gmail.com",
            "Jane <a@example.com>, b@gmail.com",
        ] {
            assert_eq!(address_of(list), list);
        }
    }

    /// The service's one address type accepts only what lettre's parser accepts, and keeps
    /// it as lettre reads it (lower case aside): an address stored for a person or an approver
    /// can always be mailed.
    #[test]
    fn every_address_the_service_keeps_is_one_lettre_reads() {
        use crate::domain::EmailAddress;
        let samples = [
            "ada@example.com",
            "Ada.Lovelace+acp@Mail.Example.ORG",
            "o'brien@example.ie",
            "a_b-c@sub-domain.example.co.uk",
            "user@[127.0.0.1]",
            "x@localhost",
            "ada..lovelace@example.com",
            "ada.@example.com",
            "ada@example..com",
            "ada@-example.com",
            "ada@example-.com",
            "\"ada lovelace\"@example.com",
            "ada@exa mple.com",
            "ada(comment)@example.com",
            "é@example.com",
            "ada@xn--bcher-kva.example",
        ];
        for raw in samples {
            if let Ok(kept) = EmailAddress::parse(raw) {
                let read = kept.as_str().parse::<lettre::Address>();
                assert!(read.is_ok(), "{raw}: kept as {kept}, which lettre refuses");
                assert_eq!(
                    read.map(|a| a.to_string()).ok().as_deref(),
                    Some(kept.as_str())
                );
            }
        }
        assert!(EmailAddress::parse("Ada.Lovelace+acp@Mail.Example.ORG").is_ok());
        assert!(EmailAddress::parse("ada..lovelace@example.com").is_err());
    }

    fn lettre(url: &str) -> String {
        lettre_url(url).unwrap().0
    }

    #[test]
    fn our_tls_modes_become_lettres_url() {
        assert_eq!(
            lettre("smtp://mx.example.com"),
            "smtp://mx.example.com:587?tls=required"
        );
        assert_eq!(
            lettre("smtp://u:p%40ss%3Aword@mx.example.com:2525/?tls=starttls"),
            "smtp://u:p%40ss%3Aword@mx.example.com:2525?tls=required"
        );
        assert_eq!(
            lettre("smtp://127.0.0.1:1025?tls=none"),
            "smtp://127.0.0.1:1025"
        );
        assert_eq!(
            lettre("smtp://mx.example.com?tls=tls"),
            "smtps://mx.example.com:587"
        );
        assert_eq!(lettre("smtp://[::1]:25?tls=none"), "smtp://[::1]:25");
        assert_eq!(
            lettre_url("smtp://user%40x@mx.example.com")
                .unwrap()
                .1
                .as_deref(),
            Some("user@x"),
            "a user without a password logs in with an empty one"
        );
        assert_eq!(lettre_url("smtp://u:p@mx.example.com").unwrap().1, None);
    }

    #[test]
    fn bad_smtp_urls_are_refused_with_the_password_hidden() {
        for (url, why) in [
            ("smtps://mx.example.com", "must be `outbox` or `smtp://...`"),
            (
                "smtp://mx.example.com?tls=ssl",
                "unknown SMTP URL parameter `tls=ssl`",
            ),
            (
                "smtp://mx.example.com?x=1",
                "unknown SMTP URL parameter `x=1`",
            ),
            ("smtp://u:secret@mx.example.com:99999", "is not a URL"),
            ("smtp://:25", "host"),
            ("smtp://", "host"),
            ("smtp://mx.example.com/helo", "takes no path"),
        ] {
            let err = lettre_url(url).unwrap_err();
            assert!(err.contains(why), "{url}: {err}");
            assert!(!err.contains("secret"), "{err}");
        }
    }

    #[tokio::test]
    async fn lettre_reads_the_translated_url() {
        for url in [
            "smtp://u:p@127.0.0.1:2525?tls=none",
            "smtp://mx.example.com",
            "smtp://mx.example.com:465?tls=tls",
        ] {
            assert!(
                Smtp::from_url(url, "acp <acp@example.com>").is_ok(),
                "{url}"
            );
        }
        for from in ["", "acp", "a@b@c"] {
            let refused = Smtp::from_url("smtp://mx.example.com", from).err();
            assert!(
                refused.is_some_and(|e| e.contains("ACP_EMAIL_FROM")),
                "{from}"
            );
        }
    }
}
