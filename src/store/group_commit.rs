//! The group-commit writer: every state change and decision record goes through it. Callers
//! hand it a [`Change`] and wait; a single task drains the queue, applies everything waiting in
//! one transaction and answers each caller only after that transaction has committed. A 2xx
//! response therefore always means its audit event is durable, at the cost of one commit per
//! batch rather than one per request.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{Change, Outcome, Store, StoreError};

type Reply = oneshot::Sender<Result<Outcome, StoreError>>;

#[derive(Clone)]
pub struct GroupCommit {
    queue: mpsc::Sender<(Change, Reply)>,
}

/// Owner's handle on the writer task.
pub struct Writer {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Writer {
    /// Refuses new changes, commits every change already queued, and waits for the task.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        if let Err(err) = self.task.await {
            tracing::error!(error = %err, "the commit writer ended abnormally");
        }
    }
}

impl GroupCommit {
    /// Starts the writer task.
    pub fn start(store: Arc<dyn Store>, max_batch: usize) -> (Self, Writer) {
        let (queue, receiver) = mpsc::channel(max_batch.max(1) * 8);
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(run(store, receiver, stopped, max_batch.max(1)));
        (Self { queue }, Writer { stop, task })
    }

    /// Applies `change` and waits until the batch holding it is committed.
    pub async fn commit(&self, change: Change) -> Result<Outcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send((change, reply))
            .await
            .map_err(|_| StoreError::Closed)?;
        answer.await.map_err(|_| StoreError::Closed)?
    }
}

async fn run(
    store: Arc<dyn Store>,
    mut receiver: mpsc::Receiver<(Change, Reply)>,
    mut stopped: oneshot::Receiver<()>,
    max_batch: usize,
) {
    let mut batch: Vec<(Change, Reply)> = Vec::with_capacity(max_batch);
    loop {
        tokio::select! {
            received = receiver.recv_many(&mut batch, max_batch) => {
                if received == 0 {
                    return;
                }
                gather(&mut receiver, &mut batch, max_batch).await;
                commit_batch(store.as_ref(), &mut batch).await;
            }
            _ = &mut stopped => break,
        }
    }
    // Shutting down: take nothing new, but commit what was already accepted.
    receiver.close();
    while receiver.recv_many(&mut batch, max_batch).await > 0 {
        commit_batch(store.as_ref(), &mut batch).await;
    }
}

/// Lets the tasks that are ready run first (a few times, while they keep queueing changes):
/// what they queue joins this batch, so under load fewer, larger batches share the writer's
/// fixed costs (its statements and its hand-offs to the database driver), which leaves more of
/// the machine to the requests. Unloaded, it costs one yield.
async fn gather(
    receiver: &mut mpsc::Receiver<(Change, Reply)>,
    batch: &mut Vec<(Change, Reply)>,
    max_batch: usize,
) {
    for _ in 0..4 {
        if batch.len() >= max_batch {
            return;
        }
        tokio::task::yield_now().await;
        let before = batch.len();
        while batch.len() < max_batch {
            match receiver.try_recv() {
                Ok(item) => batch.push(item),
                Err(_) => break,
            }
        }
        if batch.len() == before {
            return;
        }
    }
}

async fn commit_batch(store: &dyn Store, batch: &mut Vec<(Change, Reply)>) {
    let (changes, replies): (Vec<Change>, Vec<Reply>) = batch.drain(..).unzip();
    let results = match store.apply(&changes).await {
        Ok(results) => results,
        // The batch was rolled back for a transient conflict with another replica (deadlock,
        // serialization): apply each change alone, so one change's conflict is not every
        // caller's. Other failures (lost connection, a failed commit whose outcome is unknown)
        // are answered as they are: retrying could apply a change twice.
        Err(err @ StoreError::Retryable(_)) => {
            tracing::warn!(error = %err, size = changes.len(), "batch failed; applying its changes one by one");
            let mut one_by_one = Vec::with_capacity(changes.len());
            for change in &changes {
                one_by_one.push(super::apply_alone(store, change).await);
            }
            one_by_one
        }
        Err(err) => {
            let message = err.to_string();
            (0..changes.len())
                .map(|_| Err(StoreError::Database(message.clone())))
                .collect()
        }
    };
    for (reply, result) in replies.into_iter().zip(results) {
        // A caller that went away (client disconnected) no longer needs its answer.
        let _ = reply.send(result);
    }
}
