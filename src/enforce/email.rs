//! `POST /v1/email/send`: the service sends an agent's email itself, and only on allow.
//!
//! 1. The send is decided as action `send_email` with the email facts and the agent's counts of
//!    emails sent in the last minute and day. An allow reserves the send in the same transaction
//!    as the decision's audit event, serialised per agent across replicas and compared against
//!    the counts the decision saw: two replicas racing at a rate limit cannot both get through.
//! 2. The message goes to the provider (SMTP or the outbox), with a time limit.
//! 3. Delivered: the reservation becomes a sent email, audited with the recipients' domains and
//!    counts and the provider's message id (never the body). Failed: the reservation is removed
//!    (the email does not count), audited, and the caller gets 502 `provider_unavailable`.

use std::collections::BTreeSet;
use std::str::FromStr;
use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::message::Mailbox;
use serde_json::{json, Value};

use crate::api;
use crate::audit::{self, Actor};
use crate::context::SharedContext;
use crate::domain::ids;
use crate::mail::{Attachment, Email, MailError};
use crate::policy::cache::KeyAccess;
use crate::policy::check::{check_reserving, EmailReservation};
use crate::policy::evaluate::EmailFacts;

use super::{EnforceError, EnforceResult};
use crate::secret::sha256_hex;
use crate::store::{Change, EmailOp};

/// How long the provider may take before the send counts as failed.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(20);
const MAX_SUBJECT_CHARS: usize = 998;
const MAX_RECIPIENTS: usize = 100;
const MAX_ATTACHMENTS: usize = 20;
const MAX_FILENAME_CHARS: usize = 255;
/// The decoded bytes of all attachments of one email. Base64 makes them a third larger, and
/// request bodies are limited to 1 MiB: this leaves room for the rest of the message.
const MAX_ATTACHMENT_BYTES: usize = 512 * 1024;
/// The content type of an attachment that names none.
const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// One recipient: as written for delivery (`Jane Doe <jane@example.com>` or a bare address) and
/// its bare address, which is what the policy's domain and count rules read.
struct Recipient {
    mailbox: String,
    address: String,
}

/// The entries of `email.<field>` (a string or a list of strings), each exactly one mailbox.
fn recipients(email: &Value, field: &str) -> EnforceResult<Vec<Recipient>> {
    let name = format!("email.{field}");
    let entries: Vec<&Value> = match email.get(field) {
        None | Some(Value::Null) => Vec::new(),
        Some(one @ Value::String(_)) => vec![one],
        Some(Value::Array(list)) => list.iter().collect(),
        Some(_) => {
            return Err(EnforceError::invalid(
                name.clone(),
                "must be an address or a list of addresses",
            ))
        }
    };
    entries
        .into_iter()
        .map(|entry| {
            let text = entry
                .as_str()
                .ok_or_else(|| EnforceError::invalid(name.clone(), "must be strings"))?
                .trim();
            // lettre's parser takes exactly one mailbox: a list in one entry ("a@x, b@y") is
            // refused rather than judged by one of its domains.
            let mailbox = Mailbox::from_str(text).map_err(|_| {
                EnforceError::invalid(
                    name.clone(),
                    format!("must hold one email address per entry (`jane@example.com` or `Jane Doe <jane@example.com>`); `{text}` is not one"),
                )
            })?;
            Ok(Recipient {
                address: mailbox.email.to_string(),
                mailbox: mailbox.to_string(),
            })
        })
        .collect()
}

/// The files of `email.attachments`, decoded and checked: each `{filename, content_type?,
/// content}` with the content in base64; `size_bytes`, if sent, must be the decoded length.
fn attachments(email: &Value) -> EnforceResult<Vec<Attachment>> {
    let invalid = |why: String| EnforceError::malformed("invalid_attachments", why);
    let list =
        match email.get("attachments") {
            None | Some(Value::Null) => return Ok(Vec::new()),
            Some(Value::Array(list)) => list,
            Some(_) => return Err(invalid(
                "`email.attachments` must be a list of {filename, content_type, content (base64)}"
                    .into(),
            )),
        };
    if list.len() > MAX_ATTACHMENTS {
        return Err(invalid(format!(
            "at most {MAX_ATTACHMENTS} attachments per email"
        )));
    }
    let mut files = Vec::with_capacity(list.len());
    let mut total: usize = 0;
    for (i, item) in list.iter().enumerate() {
        let at = format!("email.attachments[{i}]");
        let Some(item) = item.as_object() else {
            return Err(invalid(format!(
                "`{at}` must be an object {{filename, content_type, content}}"
            )));
        };
        let filename = match item.get("filename") {
            Some(Value::String(f))
                if !f.trim().is_empty()
                    && f.chars().count() <= MAX_FILENAME_CHARS
                    && !f.chars().any(char::is_control) =>
            {
                f.clone()
            }
            _ => {
                return Err(invalid(format!(
                    "`{at}.filename` must be a file name of 1 to {MAX_FILENAME_CHARS} characters without control characters"
                )))
            }
        };
        let content_type = match item.get("content_type") {
            None | Some(Value::Null) => DEFAULT_CONTENT_TYPE.to_owned(),
            Some(Value::String(ct)) if ContentType::parse(ct.trim()).is_ok() => {
                ct.trim().to_owned()
            }
            Some(_) => {
                return Err(invalid(format!(
                    "`{at}.content_type` must be a MIME type such as `application/pdf`"
                )))
            }
        };
        let content = match item.get("content") {
            Some(Value::String(b64)) => decode_base64(b64).ok_or_else(|| {
                invalid(format!("`{at}.content` is not valid base64"))
            })?,
            None | Some(Value::Null) => {
                return Err(invalid(format!(
                    "`{at}.content` is required: the file's bytes in base64 (an attachment the service cannot deliver is refused, never dropped)"
                )))
            }
            Some(_) => return Err(invalid(format!("`{at}.content` must be a base64 string"))),
        };
        match item.get("size_bytes") {
            None | Some(Value::Null) => {}
            Some(v) if v.as_u64() == u64::try_from(content.len()).ok() => {}
            Some(_) => {
                return Err(invalid(format!(
                    "`{at}.size_bytes` is not the size of the decoded content ({} bytes)",
                    content.len()
                )))
            }
        }
        total = total.saturating_add(content.len());
        if total > MAX_ATTACHMENT_BYTES {
            return Err(EnforceError::malformed(
                "attachments_too_large",
                format!(
                    "attachments may hold at most {MAX_ATTACHMENT_BYTES} bytes in all (decoded)"
                ),
            ));
        }
        files.push(Attachment {
            filename,
            content_type,
            content,
        });
    }
    Ok(files)
}

/// Standard base64, padded or not; line breaks (as MIME tools write it) are ignored.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
    use base64::Engine as _;
    let compact: String = text.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
    STANDARD
        .decode(&compact)
        .or_else(|_| STANDARD_NO_PAD.decode(&compact))
        .ok()
}

fn body_text(email: &Value, field: &str) -> EnforceResult<Option<String>> {
    match email.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(EnforceError::invalid(
            format!("email.{field}"),
            "must be a string",
        )),
    }
}

/// A validated send: the message for the provider and the facts the policy decides on.
struct Outgoing {
    mail: Email,
    /// `{to, cc, bcc, subject, attachments?}` with bare addresses and attachment metadata, the
    /// shape `/v1/check` reads.
    facts: Value,
    /// The recipients' domains, lower-cased and distinct (for the audit event).
    domains: Vec<String>,
}

fn message(email: &Value) -> EnforceResult<Outgoing> {
    if !email.is_object() {
        return Err(EnforceError::invalid(
            "email",
            "must be {to, cc, bcc, subject, text, html, attachments}",
        ));
    }
    let to = recipients(email, "to")?;
    let cc = recipients(email, "cc")?;
    let bcc = recipients(email, "bcc")?;
    if to.is_empty() {
        return Err(EnforceError::missing("email.to"));
    }
    if to.len() + cc.len() + bcc.len() > MAX_RECIPIENTS {
        return Err(EnforceError::invalid(
            "email.to",
            format!("at most {MAX_RECIPIENTS} recipients in all"),
        ));
    }
    let subject = match email.get("subject") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => return Err(EnforceError::missing("email.subject")),
        Some(_) => return Err(EnforceError::invalid("email.subject", "must be a string")),
    };
    // A line break in the subject would inject headers.
    if subject.chars().count() > MAX_SUBJECT_CHARS || subject.chars().any(char::is_control) {
        return Err(EnforceError::invalid(
            "email.subject",
            format!("must be one line of at most {MAX_SUBJECT_CHARS} characters"),
        ));
    }
    let text = body_text(email, "text")?;
    let html = body_text(email, "html")?;
    if text.is_none() && html.is_none() {
        return Err(EnforceError::missing("email.text"));
    }
    let files = attachments(email)?;
    let bare = |list: &[Recipient]| list.iter().map(|r| r.address.clone()).collect::<Vec<_>>();
    let mut facts =
        json!({ "to": bare(&to), "cc": bare(&cc), "bcc": bare(&bcc), "subject": subject });
    if !files.is_empty() {
        // The attachment rules read filename, content type and size; the content's hash binds
        // an approval to these very files.
        facts["attachments"] = files
            .iter()
            .map(|a| {
                json!({
                    "filename": a.filename,
                    "content_type": a.content_type,
                    "size_bytes": a.content.len(),
                    "sha256": sha256_hex(&a.content),
                })
            })
            .collect();
    }
    let domains: BTreeSet<String> = to
        .iter()
        .chain(&cc)
        .chain(&bcc)
        .filter_map(|r| r.address.rsplit_once('@'))
        .map(|(_, d)| d.to_ascii_lowercase())
        .collect();
    let mailboxes = |list: Vec<Recipient>| list.into_iter().map(|r| r.mailbox).collect();
    Ok(Outgoing {
        mail: Email {
            to: mailboxes(to),
            cc: mailboxes(cc),
            bcc: mailboxes(bcc),
            subject,
            text,
            html,
            attachments: files,
        },
        facts,
        domains: domains.into_iter().collect(),
    })
}

pub async fn send(
    ctx: &SharedContext,
    access: &KeyAccess,
    actor: &Actor,
    req: api::EmailSendRequest,
) -> EnforceResult<api::EmailSendResponse> {
    let workspace_id = access.view.workspace_id.as_str();
    if req.agent_id.is_empty() {
        return Err(EnforceError::missing("agent_id"));
    }
    let agent_id = req.agent_id;
    let Outgoing {
        mail,
        facts: facts_json,
        domains,
    } = message(&req.email)?;
    // The facts the policy sees, read as `/v1/check` reads them (one address per entry).
    EmailFacts::from_json(&facts_json, crate::mail::address_of)
        .map_err(|field| EnforceError::invalid(field, "each entry must be one email address"))?;
    let reservation = EmailReservation {
        id: ids::new_id("eml"),
        recipients: i64::try_from(mail.recipients().count()).unwrap_or(i64::MAX),
    };
    let decision = check_reserving(
        ctx,
        access,
        actor,
        api::CheckRequest {
            agent_id: agent_id.clone(),
            policy_id: req.policy_id,
            action: "send_email".into(),
            context: None,
            email: Some(facts_json),
        },
        &reservation,
    )
    .await?;
    if decision.decision != "allow" {
        return Err(EnforceError::EmailBlocked(Box::new(decision)));
    }
    // Delivery and its record run in their own task: a client that disconnects (or the
    // request timeout) cannot leave a sent email unaudited or a reservation open.
    let task = tokio::spawn(deliver(
        ctx.clone(),
        mail,
        reservation.id.clone(),
        Recorded {
            workspace_id: workspace_id.to_owned(),
            agent_id: agent_id.clone(),
            actor: actor.clone(),
            trace_id: decision.trace_id.clone(),
            policy_id: decision.policy_id.clone(),
            policy_hash: decision.policy_hash.clone(),
            recipient_domains: domains,
        },
    ));
    let (provider, delivered) = task
        .await
        .map_err(|e| EnforceError::internal(format!("email delivery task: {e}")))??;
    match delivered {
        Ok(provider_message_id) => Ok(api::EmailSendResponse {
            ok: true,
            provider,
            provider_message_id,
            trace_id: decision.trace_id,
        }),
        Err(MailError::Invalid(why)) => Err(EnforceError::invalid("email", why)),
        Err(MailError::Provider(why)) => Err(EnforceError::EmailProviderFailed {
            provider,
            trace_id: decision.trace_id,
            cause: why,
        }),
    }
}

/// What the delivery's audit event carries besides the email's own facts.
struct Recorded {
    workspace_id: String,
    agent_id: String,
    actor: Actor,
    trace_id: String,
    policy_id: String,
    policy_hash: String,
    recipient_domains: Vec<String>,
}

/// Hands the message to the provider and records the outcome: the reservation becomes a sent
/// email, or is removed; either way with its audit event. Answers the provider's name and
/// message id (or its failure).
async fn deliver(
    ctx: SharedContext,
    mail: Email,
    email_id: String,
    rec: Recorded,
) -> EnforceResult<(String, Result<String, MailError>)> {
    let provider = ctx.mailer.provider().to_owned();
    let delivered = match tokio::time::timeout(PROVIDER_TIMEOUT, ctx.mailer.send(&mail)).await {
        Ok(result) => result,
        Err(_) => Err(MailError::Provider("timed out".into())),
    };
    // The provider's own words can echo addresses, so only the kind of failure is recorded.
    let (event_type, message_id, error) = match &delivered {
        Ok(id) => ("email.sent", Some(id.clone()), None),
        Err(MailError::Invalid(_)) => ("email.failed", None, Some("invalid_message")),
        Err(MailError::Provider(_)) => ("email.failed", None, Some("provider_unavailable")),
    };
    let mut details = json!({
        "email_id": email_id,
        "provider": provider,
        "recipient_domains": rec.recipient_domains,
        "to_count": mail.to.len(),
        "cc_count": mail.cc.len(),
        "bcc_count": mail.bcc.len(),
        "has_text": mail.text.is_some(),
        "has_html": mail.html.is_some(),
        "attachment_count": mail.attachments.len(),
        "attachment_bytes": mail.attachments.iter().map(|a| a.content.len()).sum::<usize>(),
        "provider_message_id": message_id,
    });
    if let Some(error) = error {
        details["error"] = json!(error);
    }
    let mut event = audit::state_change(
        event_type,
        "send_email",
        Some(&rec.workspace_id),
        Some(&rec.agent_id),
        &rec.actor,
        details,
    );
    event.decision = Some("allow".into());
    event.trace_id = Some(rec.trace_id);
    event.policy_id = Some(rec.policy_id);
    event.policy_hash = Some(rec.policy_hash);
    ctx.writer
        .commit(
            Change::new(EmailOp::Finish {
                id: email_id,
                provider: provider.clone(),
                provider_message_id: message_id,
            })
            .audited(event),
        )
        .await?;
    Ok((provider, delivered))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(email: Value) -> EnforceResult<Outgoing> {
        message(&email)
    }

    fn code(result: EnforceResult<Outgoing>) -> String {
        match result {
            Ok(_) => "ok".into(),
            Err(EnforceError::Field(e)) => e.code(),
            Err(EnforceError::Refused(e)) => e.code.into_owned(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn display_names_go_out_and_the_policy_reads_the_address() {
        let out = send(
            json!({"to": ["Jane Doe <Jane@Example.COM>", "bob@example.com"],
            "bcc": "\"Ops, EU\" <ops@corp.example>", "subject": "s", "text": "t"}),
        )
        .unwrap();
        assert_eq!(out.mail.to[0], "Jane Doe <Jane@Example.COM>");
        assert_eq!(out.mail.bcc[0], "\"Ops, EU\" <ops@corp.example>");
        // What goes to the provider parses back to the same mailbox.
        for m in out.mail.recipients() {
            assert_eq!(Mailbox::from_str(m).unwrap().to_string(), *m);
        }
        assert_eq!(
            out.facts["to"],
            json!(["Jane@Example.COM", "bob@example.com"])
        );
        assert_eq!(out.facts["bcc"], json!(["ops@corp.example"]));
        assert_eq!(out.domains, ["corp.example", "example.com"]);
        assert!(out.facts.get("attachments").is_none());
        assert!(EmailFacts::from_json(&out.facts, crate::mail::address_of).is_ok());
        for bad in [
            "a@example.com, b@evil.test",
            "Jane <a@example.com> b@evil.test",
            "",
            "x",
        ] {
            assert_eq!(
                code(send(json!({"to": [bad], "subject": "s", "text": "t"}))),
                "invalid_email.to",
                "{bad}"
            );
        }
    }

    #[test]
    fn attachments_are_decoded_and_described_for_the_policy() {
        let out = send(json!({"to": "a@example.com", "subject": "s", "text": "t", "attachments": [
            {"filename": "r.pdf", "content_type": " application/pdf ", "content": "aGVsbG8=", "size_bytes": 5},
            {"filename": "x", "content": "aGVsbG8"},
        ]}))
        .unwrap();
        assert_eq!(out.mail.attachments[0].content, b"hello");
        assert_eq!(out.mail.attachments[1].content_type, DEFAULT_CONTENT_TYPE);
        assert_eq!(
            out.facts["attachments"][0],
            json!({"filename": "r.pdf", "content_type": "application/pdf", "size_bytes": 5,
                "sha256": sha256_hex(b"hello")})
        );
        let facts = EmailFacts::from_json(&out.facts, crate::mail::address_of).unwrap();
        assert_eq!(facts.attachments.len(), 2);
        assert_eq!(facts.attachments[0].size_bytes, 5);
    }

    #[test]
    fn bad_attachments_name_the_problem() {
        let with = |a: Value| {
            code(send(
                json!({"to": "a@example.com", "subject": "s", "text": "t", "attachments": a}),
            ))
        };
        assert_eq!(with(json!({})), "invalid_attachments");
        assert_eq!(
            with(json!([{"filename": "a", "content": "%%%"}])),
            "invalid_attachments"
        );
        assert_eq!(
            with(json!([{"filename": "a", "content": "aGVsbG8=", "content_type": "nope"}])),
            "invalid_attachments"
        );
        assert_eq!(
            with(json!([{"filename": "a", "content": "aGVsbG8=", "size_bytes": "5"}])),
            "invalid_attachments"
        );
        assert_eq!(
            with(json!((0..=MAX_ATTACHMENTS)
                .map(|i| json!({"filename": format!("f{i}"), "content": ""}))
                .collect::<Vec<_>>())),
            "invalid_attachments"
        );
        let big = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            vec![0u8; MAX_ATTACHMENT_BYTES + 1],
        );
        assert_eq!(
            with(json!([{"filename": "big", "content": big}])),
            "attachments_too_large"
        );
    }
}
