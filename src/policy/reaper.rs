//! Frees replaced compiled policies off the async threads. A compiled policy of a large spec
//! takes seconds to free (tens of thousands of rules, each a tree of small allocations); freed
//! where the cache dropped it, that would be on a tokio worker, stalling every request queued
//! on it. The cache hands each removed policy here instead: a thread of its own keeps it until
//! it holds the last reference (requests still deciding with it drop theirs first) and frees
//! it then.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// What the reaper holds: a replaced compiled policy, or anything else slow to free (it needs
/// nothing of it but its count of holders, so it names none of the cache's types).
pub type Held = Arc<dyn std::any::Any + Send + Sync>;

/// How often held policies are looked at again while others still hold them.
const RECHECK: Duration = Duration::from_millis(200);

/// Hands `policy` to the reaper thread, to be freed there once no one else holds it. Without
/// the thread (it could not be started), it is dropped here, as before.
pub fn release(policy: Held) {
    match sender() {
        Some(tx) => {
            if let Err(mpsc::SendError(policy)) = tx.send(policy) {
                drop(policy);
            }
        }
        None => drop(policy),
    }
}

fn sender() -> Option<Sender<Held>> {
    static SENDER: OnceLock<Option<Mutex<Sender<Held>>>> = OnceLock::new();
    SENDER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel();
            let started = std::thread::Builder::new()
                .name("acp-policy-reaper".into())
                .spawn(move || reap(rx));
            match started {
                Ok(_) => Some(Mutex::new(tx)),
                Err(err) => {
                    tracing::warn!(error = %err, "no thread to free replaced policies on; they are freed where they are dropped");
                    None
                }
            }
        })
        .as_ref()
        .and_then(|tx| tx.lock().ok().map(|tx| tx.clone()))
}

/// The thread: takes released policies, frees each once it is the last holder.
fn reap(rx: mpsc::Receiver<Held>) {
    let mut held: Vec<Held> = Vec::new();
    loop {
        let next = if held.is_empty() {
            rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            rx.recv_timeout(RECHECK)
        };
        match next {
            Ok(policy) => held.push(policy),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        // Dropping a sole holder frees the policy, here.
        held.retain(|policy| Arc::strong_count(policy) > 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_policy_is_freed_once_its_last_other_holder_lets_go() {
        // A distinct allocation, as a replaced version is.
        let mine = Arc::new(vec![0u8; 4096]);
        let weak = Arc::downgrade(&mine);
        let request = mine.clone();
        release(mine);
        // Still held by the "request" deciding with it.
        std::thread::sleep(RECHECK * 2);
        assert!(weak.upgrade().is_some());
        drop(request);
        // Freed by the reaper within a few rechecks (bounded wait: a functional check).
        let mut freed = false;
        for _ in 0..100 {
            if weak.upgrade().is_none() {
                freed = true;
                break;
            }
            std::thread::sleep(RECHECK);
        }
        assert!(freed, "the reaper freed the policy");
    }
}
