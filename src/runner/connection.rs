//! The Runner's connection to the control plane: connect with back-off, long-poll leases,
//! and hand each leased command to [`super::dispatch`].

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use super::client::MachineError;
use super::dispatch::handle;
use super::{RunnerError, Shared, instance, status, telemetry};
use crate::api::machine::codes;

/// Jittered, capped exponential back-off: 250 ms doubling to 30 s, each wait drawn from
/// its upper half so a fleet does not reconnect in step.
pub(super) fn backoff(attempt: u32) -> Duration {
    let cap = 250u64.saturating_mul(1 << attempt.min(7)).min(30_000);
    Duration::from_millis(rand::rng().random_range(cap / 2..=cap))
}

fn refused(e: &MachineError) -> Option<RunnerError> {
    let message = match e.code()? {
        codes::RUNNER_LIVE => {
            let message = match e {
                MachineError::Api { message, .. } => message.clone(),
                other => other.to_string(),
            };
            return Some(RunnerError::OnlineElsewhere(message));
        }
        codes::RUNNER_DISABLED
        | codes::UNKNOWN_RUNNER
        | codes::TOKEN_EXPIRED
        | codes::REPLACED
        | codes::UPGRADE_REQUIRED
        | codes::ORIGIN_REFUSED => e.to_string(),
        _ => return None,
    };
    Some(RunnerError::Refused(message))
}

/// After `e`, the next connection goes to another replica when there is one and this one
/// is gone (a replica that answers with an error is alive, and shares the database).
fn move_on(shared: &Shared, e: &MachineError) {
    if e.replica_gone() && shared.client.fail_over() {
        tracing::warn!(server = %shared.client.server(), "moving to another replica of the control plane");
    }
}

pub(super) async fn lease_loop(
    shared: &Arc<Shared>,
    tasks: &TaskTracker,
    slots: &Arc<Semaphore>,
    shutdown: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) -> Result<Option<i64>, RunnerError> {
    let mut attempt = 0u32;
    'connect: loop {
        let status = status(shared);
        let connected = tokio::select! {
            r = shared.client.connect(&status) => r,
            _ = &mut *shutdown => return Ok(None),
        };
        let connected = match connected {
            Ok(c) => c,
            Err(e) => {
                if let Some(fatal) = refused(&e) {
                    return Err(fatal);
                }
                if !e.is_transient() {
                    return Err(RunnerError::Refused(e.to_string()));
                }
                let wait = backoff(attempt);
                attempt += 1;
                tracing::warn!(error = %e, server = %shared.client.server(), retry_in = ?wait, attempt, "cannot connect to the control plane; retrying");
                move_on(shared, &e);
                tokio::select! {
                    _ = tokio::time::sleep(wait) => continue 'connect,
                    _ = &mut *shutdown => return Ok(None),
                }
            }
        };
        // The Runner keeps its generation as the number it sends in a header.
        let generation = connected.generation.get();
        shared.active();
        shared.batches.set_offered(
            connected
                .features
                .iter()
                .any(|f| f == crate::api::machine::features::COMMAND_BATCHES),
        );
        if let Err(e) = instance::record(&shared.data_dir, &shared.client.instance) {
            tracing::warn!(error = %e, "cannot record this instance in the data directory; its next start may need --replace");
        }
        if let Some(c) = &shared.computers {
            *c.generation.lock().unwrap_or_else(|e| e.into_inner()) = generation;
            // The control plane ended every lease of the earlier generation: its containers
            // are orphans now, and their pool slots free.
            match c.reconcile().await {
                Ok(0) => {}
                Ok(n) => tracing::warn!(
                    removed = n,
                    generation,
                    "leases ended with the new connection: removed their containers"
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "could not remove the containers of ended leases")
                }
            }
        }
        // A new connection: the grants of the earlier one ended, and with them the browser
        // contexts they opened (their profiles stay).
        if let Some(b) = &shared.browser {
            let closed = b.close_all().await;
            if closed > 0 {
                tracing::info!(closed, "browser contexts of the earlier connection closed");
            }
        }
        tracing::info!(
            runner = %connected.runner_id,
            server = %shared.client.server(),
            generation,
            instance = %shared.client.instance,
            "connected to the control plane"
        );
        telemetry::connected(true);
        for id in &connected.uncertain {
            tracing::warn!(command = %id, "the control plane marked a command of an earlier connection uncertain");
        }
        shared
            .rotation
            .maybe(&shared.client, generation, connected.rotate_token)
            .await;
        attempt = 0;
        loop {
            // Lease only what can run now; wait for a free slot first.
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => p.expect("semaphore never closes"),
                _ = &mut *shutdown => return Ok(Some(generation)),
            };
            let max = slots.available_permits() as u32 + 1;
            drop(permit);
            let poll = telemetry::LongPoll::open();
            let leased = tokio::select! {
                r = shared.client.lease(generation, max) => r,
                _ = &mut *shutdown => return Ok(Some(generation)),
            };
            drop(poll);
            match leased {
                Ok(leased) => {
                    for cmd in leased.commands {
                        let permit = slots.clone().try_acquire_owned().ok();
                        let shared = shared.clone();
                        tasks.spawn(async move {
                            handle(&shared, generation, cmd).await;
                            drop(permit);
                        });
                    }
                    shared
                        .rotation
                        .maybe(&shared.client, generation, leased.rotate_token)
                        .await;
                }
                Err(e) => {
                    if let Some(fatal) = refused(&e) {
                        return Err(fatal);
                    }
                    telemetry::connected(false);
                    if e.code() == Some(codes::STALE_GENERATION) {
                        tracing::warn!(
                            generation,
                            "connection generation ended (control plane restart?); reconnecting"
                        );
                        continue 'connect;
                    }
                    let wait = backoff(attempt);
                    attempt += 1;
                    tracing::warn!(error = %e, server = %shared.client.server(), retry_in = ?wait, "lost the control plane; reconnecting");
                    move_on(shared, &e);
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => continue 'connect,
                        _ = &mut *shutdown => return Ok(None),
                    }
                }
            }
        }
    }
}
