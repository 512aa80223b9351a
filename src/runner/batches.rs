//! Starts and outcomes of commands, sent several per request where the control plane
//! offers it (`command-batches-v1`): each command's task asks for itself, and whatever
//! queued up while the previous request was out goes in the next one. Every caller gets
//! the answer its single-command request would have given, so retries and refusals stay
//! per command. With an older control plane every call goes alone, as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{mpsc, oneshot};

use super::client::{MachineClient, MachineError};
use crate::api::machine::{
    BATCH_RESULT_BYTES, BatchItem, CompleteParams, CompleteReport, MAX_BATCH, StartGranted,
};

/// Calls waiting for their batch, at most (each is a running command's task; the
/// Runner's `--max-concurrent` bounds them long before this).
const QUEUED: usize = 4096;

type Reply<T> = oneshot::Sender<Result<T, MachineError>>;

struct Call<Q, T> {
    generation: i64,
    ask: Q,
    reply: Reply<T>,
}

/// The Runner's way to start and complete commands.
pub struct Batches {
    client: MachineClient,
    /// The control plane of the current connection takes batches.
    offered: Arc<AtomicBool>,
    starts: mpsc::Sender<Call<String, StartGranted>>,
    completes: mpsc::Sender<Call<CompleteReport, ()>>,
}

impl Batches {
    /// Must be made inside the runtime: it starts the two senders.
    pub fn new(client: MachineClient) -> Batches {
        let (starts, start_rx) = mpsc::channel(QUEUED);
        let (completes, complete_rx) = mpsc::channel(QUEUED);
        tokio::spawn(send_starts(client.clone(), start_rx));
        tokio::spawn(send_completes(client.clone(), complete_rx));
        Batches {
            client,
            offered: Arc::default(),
            starts,
            completes,
        }
    }

    /// What the control plane of a new connection offers.
    pub fn set_offered(&self, yes: bool) {
        self.offered.store(yes, Ordering::Relaxed);
    }

    /// `POST /runner/v1/commands/{id}/start`, in a batch when offered.
    pub async fn start(&self, generation: i64, id: &str) -> Result<StartGranted, MachineError> {
        if !self.offered.load(Ordering::Relaxed) {
            return self
                .client
                .command_call(generation, id, "start", &serde_json::json!({}))
                .await;
        }
        queue(&self.starts, generation, id.to_string()).await
    }

    /// `POST /runner/v1/commands/{id}/complete`, in a batch when offered and small.
    pub async fn complete(
        &self,
        generation: i64,
        id: &str,
        params: &CompleteParams,
    ) -> Result<(), MachineError> {
        let small = params
            .result
            .as_ref()
            .is_none_or(|r| r.to_string().len() <= BATCH_RESULT_BYTES);
        if !self.offered.load(Ordering::Relaxed) || !small {
            let _: serde_json::Value = self
                .client
                .command_call(generation, id, "complete", params)
                .await?;
            return Ok(());
        }
        let report = CompleteReport {
            id: id.to_string(),
            outcome: params.outcome,
            result: params.result.clone(),
            error: params.error.clone(),
        };
        queue(&self.completes, generation, report).await
    }
}

async fn queue<Q, T>(
    to: &mpsc::Sender<Call<Q, T>>,
    generation: i64,
    ask: Q,
) -> Result<T, MachineError> {
    let (reply, answer) = oneshot::channel();
    let gone = || MachineError::Transport("the Runner's request sender stopped".into());
    to.send(Call {
        generation,
        ask,
        reply,
    })
    .await
    .map_err(|_| gone())?;
    answer.await.map_err(|_| gone())?
}

/// The next batch: the first call, then whatever else is queued for the same generation
/// (a call of another generation waits in `carry` for the batch after).
async fn next_batch<Q, T>(
    rx: &mut mpsc::Receiver<Call<Q, T>>,
    carry: &mut Option<Call<Q, T>>,
) -> Option<Vec<Call<Q, T>>> {
    let first = match carry.take() {
        Some(c) => c,
        None => rx.recv().await?,
    };
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(c) if c.generation == batch[0].generation => batch.push(c),
            Ok(c) => {
                *carry = Some(c);
                break;
            }
            Err(_) => break,
        }
    }
    Some(batch)
}

/// Hands each caller its item's answer; a request that failed as a whole fails each.
fn answer<Q, T>(
    batch: Vec<Call<Q, T>>,
    answered: Result<Vec<BatchItem>, MachineError>,
    each: impl Fn(BatchItem) -> Result<T, MachineError>,
) {
    match answered {
        Ok(items) if items.len() == batch.len() => {
            for (call, item) in batch.into_iter().zip(items) {
                let result = match item.refused {
                    Some(r) => Err(MachineError::Api {
                        status: r.status,
                        code: r.code,
                        message: r.message,
                    }),
                    None => each(item),
                };
                let _ = call.reply.send(result);
            }
        }
        Ok(items) => {
            let e = MachineError::Transport(format!(
                "the control plane answered {} of {} commands in a batch",
                items.len(),
                batch.len()
            ));
            for call in batch {
                let _ = call.reply.send(Err(e.clone()));
            }
        }
        Err(e) => {
            for call in batch {
                let _ = call.reply.send(Err(e.clone()));
            }
        }
    }
}

async fn send_starts(client: MachineClient, mut rx: mpsc::Receiver<Call<String, StartGranted>>) {
    let mut carry = None;
    while let Some(batch) = next_batch(&mut rx, &mut carry).await {
        let ids: Vec<String> = batch.iter().map(|c| c.ask.clone()).collect();
        let answered = client.start_batch(batch[0].generation, ids).await;
        answer(batch, answered, |item| match item.deadline_ms {
            Some(deadline_ms) => Ok(StartGranted {
                id: item.id,
                deadline_ms,
            }),
            None => Err(MachineError::Transport(
                "the control plane granted a start without a deadline".into(),
            )),
        });
    }
}

async fn send_completes(client: MachineClient, mut rx: mpsc::Receiver<Call<CompleteReport, ()>>) {
    let mut carry = None;
    while let Some(batch) = next_batch(&mut rx, &mut carry).await {
        let reports = batch.iter().map(|c| c.ask.clone()).collect();
        let answered = client.complete_batch(batch[0].generation, reports).await;
        answer(batch, answered, |_| Ok(()));
    }
}
