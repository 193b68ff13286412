//! A real SMTP server on loopback for the tests: it speaks the protocol (EHLO, MAIL, RCPT,
//! DATA, QUIT) to whatever client connects, and keeps what it receives.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::Notify;

#[derive(Debug, Clone)]
pub struct Received {
    pub from: String,
    pub rcpt: Vec<String>,
    pub data: String,
}

#[derive(Clone)]
pub struct SmtpSink {
    pub port: u16,
    messages: Arc<Mutex<Vec<Received>>>,
    arrived: Arc<Notify>,
}

impl SmtpSink {
    pub async fn start() -> SmtpSink {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let sink = SmtpSink {
            port,
            messages: Default::default(),
            arrived: Default::default(),
        };
        let s = sink.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    let _ = s.session(conn).await;
                });
            }
        });
        sink
    }

    /// `smtp://127.0.0.1:PORT?tls=none`
    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}?tls=none", self.port)
    }

    async fn session(&self, conn: tokio::net::TcpStream) -> std::io::Result<()> {
        let (read, mut write) = conn.into_split();
        let mut lines = BufReader::new(read).lines();
        write.write_all(b"220 sink ESMTP ready\r\n").await?;
        let (mut from, mut rcpt) = (String::new(), Vec::new());
        while let Some(line) = lines.next_line().await? {
            let upper = line.to_ascii_uppercase();
            if upper.starts_with("EHLO") || upper.starts_with("HELO") {
                write
                    .write_all(b"250-sink greets you\r\n250 8BITMIME\r\n")
                    .await?;
            } else if upper.starts_with("MAIL FROM:") {
                from = line[10..].trim().trim_matches(['<', '>']).to_owned();
                rcpt.clear();
                write.write_all(b"250 OK\r\n").await?;
            } else if upper.starts_with("RCPT TO:") {
                rcpt.push(line[8..].trim().trim_matches(['<', '>']).to_owned());
                write.write_all(b"250 OK\r\n").await?;
            } else if upper == "DATA" {
                write.write_all(b"354 end with .\r\n").await?;
                let mut data = String::new();
                while let Some(l) = lines.next_line().await? {
                    if l == "." {
                        break;
                    }
                    data.push_str(l.strip_prefix('.').unwrap_or(&l));
                    data.push('\n');
                }
                self.messages.lock().unwrap().push(Received {
                    from: from.clone(),
                    rcpt: rcpt.clone(),
                    data,
                });
                self.arrived.notify_waiters();
                write.write_all(b"250 queued\r\n").await?;
            } else if upper == "QUIT" {
                write.write_all(b"221 bye\r\n").await?;
                return Ok(());
            } else if upper == "RSET" || upper == "NOOP" {
                write.write_all(b"250 OK\r\n").await?;
            } else {
                write.write_all(b"502 not implemented\r\n").await?;
            }
        }
        Ok(())
    }

    pub fn messages(&self) -> Vec<Received> {
        self.messages.lock().unwrap().clone()
    }

    /// Waits (up to 10 s) until `count` messages have arrived.
    pub async fn wait_for(&self, count: usize) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let notified = self.arrived.notified();
            let now = self.messages();
            if now.len() >= count {
                return now;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("expected {count} messages, got {}", self.messages().len());
            }
        }
    }
}

/// The login link in a received message (quoted-printable soft breaks undone).
pub fn login_link(message: &Received) -> String {
    let text = message.data.replace("=\n", "").replace("=3D", "=");
    let start = text.find("http://").expect("a link in the message");
    text[start..]
        .split(|c: char| c.is_whitespace() || c == '"' || c == '<')
        .next()
        .unwrap()
        .to_owned()
}
