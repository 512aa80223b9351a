//! The team scheduler: a task of the control plane that turns the durable work items in
//! the database (ready subtasks, goals that need their admin, pending deliveries) into
//! turns. It runs a pass whenever the Queue reports a change (a turn ended, a Runner
//! connected, a goal or subtask changed) and once a second while nothing happens, so the
//! back-off of uncertain turns and a restart need no other trigger. A chat session is
//! never the scheduler; the state it acts on survives restarts.

use std::time::Duration;

use super::queue::Queue;
use super::store::schedule;

/// The longest a pass waits for a wake-up.
const IDLE_PASS: Duration = Duration::from_secs(1);

impl Queue {
    /// Runs scheduler passes until the server shuts down.
    pub async fn schedule_forever(self) {
        let mut shutdown = self.shutdown_signal();
        loop {
            if *shutdown.borrow() {
                return;
            }
            if self.leads()
                && let Err(e) = self.schedule_once().await
            {
                tracing::warn!(error = %e, "team scheduler pass failed");
            }
            tokio::select! {
                _ = self.sched().notified() => {}
                _ = tokio::time::sleep(IDLE_PASS) => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    /// One pass: settle ended turns, admit ready work, stop and remove what ended.
    pub async fn schedule_once(&self) -> Result<usize, super::store::StoreError> {
        let limits = self.limits();
        // Most passes find nothing to do: that is one statement, read without the store's
        // lock (a wake-up from another replica asks for a pass every time).
        if !self
            .store()
            .call_unlocked_relaxed(|c| schedule::any_work(c))
            .await?
        {
            super::telemetry::scheduler_pass();
            return Ok(0);
        }
        let pass = self
            .store()
            .call(move |c| schedule::pass(c, limits))
            .await?;
        for runner in &pass.runners {
            self.wake(runner, true);
        }
        for session in pass.stop_sessions {
            // The goal was stopped or ended while its turn ran; the turn settles later.
            if let Err(e) = self.session_stop(session.clone()).await {
                tracing::debug!(%session, error = %e, "stop of a goal's turn");
            }
        }
        for computer in pass.remove_computers {
            if let Err(e) = self.computer_stop(computer.clone(), true).await {
                tracing::debug!(%computer, error = %e, "removing a retired helper's computer");
            }
        }
        // Counted once the pass acted: a count that moved past N+1 proves a whole pass ran
        // after the moment it read N (tests wait on it instead of sleeping).
        super::telemetry::scheduler_pass();
        Ok(pass.admitted)
    }
}
