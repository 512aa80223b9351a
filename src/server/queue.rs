//! The command service: every change to a Runner's command queue goes through [`Queue`].
//! It writes the change in one transaction, settles the objects the command drives (turns,
//! stops, computers) by its kind, and wakes whoever waits: the Runner's long-poll when it
//! has new work, and waiters on outcomes whenever a command of that Runner changed.
//! Handlers parse, call one method here, and shape the view.

use crate::server::store::Db;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};

use super::hub::{GenerationError, Hub, RunnerSignals};
use super::store::agents::{self, AgentRow};
use super::store::commands::{self, Cancelled, CommandRow, QueueLimits, StartRefused};
use super::store::computer_idle;
use super::store::computers::{self, ComputerRow};
use super::store::sessions::{self, Admission, SessionRow};
use super::store::turn_waits::{self, Chat};
use super::store::{Store, StoreError, retention, runner_images, runners};

use crate::api::ids::{CommandId, Generation, RunnerId, SessionId};
use crate::api::machine::{Connected, LeasedCommand, Outcome, RunnerCommand, RunnerStatus};
use crate::api::sessions::TurnEvent;

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("runner {0} was disabled by an admin; register a new Runner to continue")]
    Disabled(RunnerId),
    #[error("connection generation {0} is not current: connect again")]
    StaleGeneration(Generation),
    #[error(
        "another instance ({0}) of this Runner connected after this one; only one instance may run"
    )]
    Replaced(String),
    #[error(transparent)]
    StartRefused(StartRefused),
    #[error("the control plane is shutting down; reconnect later")]
    ShuttingDown,
}

/// A lease's database call: the leased commands and whether the answer has anything for
/// the Runner; `None` where it must lease again under the store's lock.
type LeaseAnswer = Result<Option<(Vec<LeasedCommand>, bool)>, QueueError>;

impl From<StartRefused> for QueueError {
    fn from(e: StartRefused) -> Self {
        match e {
            StartRefused::Store(e) => QueueError::Store(e),
            other => QueueError::StartRefused(other),
        }
    }
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEnd {
    /// What was waited for happened.
    Ready,
    TimedOut,
    ShuttingDown,
}

/// Which wake-up a wait listens to.
#[derive(Clone, Copy)]
enum Signal {
    /// New work, a new generation or a disable (Runners' long-polls).
    Work,
    /// A command of the Runner changed state (waiters on outcomes and events).
    Changed,
}

#[derive(Clone)]
pub struct Queue {
    store: Store,
    hub: Arc<Hub>,
    limits: QueueLimits,
    /// Turns true when the server begins to shut down: waits answer at once.
    shutdown: watch::Receiver<bool>,
    /// Wakes the team scheduler (`scheduler.rs`) after any change it may act on.
    sched: Arc<tokio::sync::Notify>,
    /// The other replicas on the same PostgreSQL database, told of every wake-up.
    peers: Option<Arc<super::peers::Peers>>,
    /// With replicas: whether this one does the once-only work now.
    leadership: Option<Arc<super::leader::Leadership>>,
}

impl Queue {
    pub fn new(store: Store, limits: QueueLimits, shutdown: watch::Receiver<bool>) -> Queue {
        Queue {
            store,
            hub: Arc::default(),
            limits,
            shutdown,
            sched: Arc::default(),
            peers: None,
            leadership: None,
        }
    }

    /// One of the replicas on the PostgreSQL database at `url`: tells the others of every
    /// wake-up and listens for theirs, and does the once-only work (the scheduler's
    /// passes, sweeps, retention) only while it holds the leader lock.
    /// `uploads` hears of the artifact uploads that moved through another replica.
    pub fn replicated(mut self, url: String, uploads: super::peers::UploadMoved) -> Queue {
        self.peers = Some(super::peers::Peers::start(
            url.clone(),
            self.hub.clone(),
            self.sched.clone(),
            self.store.backend_pid(),
            uploads,
        ));
        self.leadership = Some(super::leader::Leadership::start(url));
        self
    }

    /// Whether this process does the once-only work now: always alone, with replicas
    /// only the one holding the leader lock.
    pub(super) fn leads(&self) -> bool {
        self.leadership.as_ref().is_none_or(|l| l.held())
    }

    /// Asks the team scheduler for a pass (cheap; passes coalesce).
    pub fn kick(&self) {
        self.sched.notify_one();
    }

    pub(super) fn sched(&self) -> &tokio::sync::Notify {
        &self.sched
    }

    pub(super) fn limits(&self) -> QueueLimits {
        self.limits
    }

    pub(super) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.clone()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Runs a state change that may queue commands on a Runner or end some of its
    /// commands, then wakes the Runner's long-poll and every waiter on it. (A change may
    /// queue more than it returns: a stop of a turn in flight queues a `cancel`.)
    async fn change<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Touches + Send + 'static,
        F: FnOnce(&mut Db, QueueLimits) -> Result<R, StoreError> + Send + 'static,
    {
        let limits = self.limits;
        // With replicas the others hear of the change from its own commit: the NOTIFY goes
        // out with the COMMIT (no round trip, and none for a change that is rolled back).
        let in_commit = self.peers.is_some();
        // This replica's long-poll of that Runner hears of it at the commit, before the
        // disk confirms it (see `Store::call_on_commit`); whoever waits for the change
        // itself hears after the answer, below.
        let hub = self.hub.clone();
        let done = self
            .store
            .call_on_commit(
                move |c| {
                    let done = f(c, limits)?;
                    if in_commit && let Some(runner) = done.touches() {
                        c.notify_peers(&super::peers::payload(&runner, true));
                    }
                    Ok(done)
                },
                move |done: &R| {
                    if let Some(runner) = done.touches() {
                        hub.signals(&runner).work.notify_waiters();
                    }
                },
            )
            .await?;
        if let Some(runner) = done.touches() {
            if in_commit {
                self.wake_here(&runner, true);
            } else {
                self.wake(&runner, true);
            }
        }
        Ok(done)
    }

    /// Ends the Runner's long-poll wait so it looks again (an admin's token rotation).
    pub fn wake_runner(&self, runner_id: &RunnerId) {
        self.wake(runner_id, true);
    }

    pub(super) fn wake(&self, runner_id: &RunnerId, enqueued: bool) {
        if let Some(peers) = &self.peers {
            peers.publish(runner_id, enqueued);
        }
        self.wake_here(runner_id, enqueued);
    }

    /// Tells the other replicas (if any) that the upload of `command`'s artifact moved.
    pub(super) fn upload_moved(&self, command: &str, restarted: bool) {
        if let Some(peers) = &self.peers {
            peers.publish_upload(command, restarted);
        }
    }

    /// [`Queue::wake`] of this replica's own waiters only.
    fn wake_here(&self, runner_id: &RunnerId, enqueued: bool) {
        self.sched.notify_one();
        let signals = self.hub.signals(runner_id);
        if enqueued {
            signals.work.notify_waiters();
        }
        signals.done.notify_waiters();
    }

    // ---- the admin side: work for Runners ----

    /// Queues `command` on the Runner given by id or unique prefix; `timeout_ms` for a
    /// kind whose caller chooses its deadline.
    pub async fn enqueue(
        &self,
        runner_key: String,
        command: RunnerCommand,
        timeout_ms: Option<u64>,
    ) -> Result<CommandRow, StoreError> {
        self.change(move |c, limits| {
            // A full id first (what scripts and the CLI send): no separate look-up.
            match commands::enqueue(c, &RunnerId::new(&runner_key), &command, timeout_ms, limits) {
                Err(StoreError::NotFound(_)) => {
                    let runner_id = RunnerId::new(runners::resolve(c, &runner_key)?);
                    commands::enqueue(c, &runner_id, &command, timeout_ms, limits)
                }
                other => other,
            }
        })
        .await
    }

    /// Cancels a command: at once when it was not delivered, else through a `cancel`
    /// command to its Runner.
    pub async fn cancel(&self, id: CommandId) -> Result<CommandRow, StoreError> {
        let (Cancelled::Dequeued(row) | Cancelled::Requested(row)) = self
            .change(move |c, _| {
                let outcome = commands::cancel(c, &id)?;
                // What a dequeued command drove (a computer starting) ends now, not at its
                // deadline.
                if let Cancelled::Dequeued(row) = &outcome {
                    commands::settle(c, Some(row.kind))?;
                }
                Ok(outcome)
            })
            .await?;
        Ok(row)
    }

    pub async fn computer_create(
        &self,
        account_id: String,
        agent: String,
    ) -> Result<ComputerRow, StoreError> {
        let (row, _) = self
            .change(move |c, limits| computers::create(c, &account_id, &agent, limits))
            .await?;
        Ok(row)
    }

    /// Stops a computer (its workspace stays), or removes it with its workspace.
    pub async fn computer_stop(&self, id: String, remove: bool) -> Result<ComputerRow, StoreError> {
        let (row, _) = self
            .change(move |c, _| computers::stop(c, &id, remove))
            .await?;
        Ok(row)
    }

    pub async fn computer_exec(
        &self,
        account_id: String,
        id: String,
        argv: Vec<String>,
        timeout_ms: u64,
        output_cap_bytes: u64,
    ) -> Result<CommandRow, StoreError> {
        self.change(move |c, limits| {
            computers::exec(
                c,
                &account_id,
                &id,
                &argv,
                Some(timeout_ms),
                Some(output_cap_bytes),
                limits,
            )
        })
        .await
    }

    pub async fn computer_screen(
        &self,
        account_id: String,
        id: String,
        action: crate::computer::screen::ScreenAction,
        control_fence: Option<i64>,
        frame_id: Option<String>,
    ) -> Result<CommandRow, StoreError> {
        self.change(move |c, limits| {
            super::store::control::check_input(
                c,
                &account_id,
                &id,
                &action,
                control_fence,
                frame_id.as_deref(),
            )?;
            computers::screen(c, &account_id, &id, &action, frame_id, limits)
        })
        .await
    }

    /// An operator takes control of a computer (the model pauses at its next tool call).
    pub async fn control_take(
        &self,
        account_id: String,
        id: String,
    ) -> Result<crate::api::computers::Control, StoreError> {
        self.change(move |c, limits| super::store::control::take(c, &account_id, &id, limits))
            .await
            .map(|(c, _)| c)
    }

    /// Renews or releases an operator's control under the fence they hold.
    pub async fn control_renew(
        &self,
        account_id: String,
        id: String,
        fence: i64,
        release: bool,
    ) -> Result<crate::api::computers::Control, StoreError> {
        self.change(move |c, _| {
            super::store::control::renew_or_release(c, &account_id, &id, fence, release)
        })
        .await
        .map(|(c, _)| c)
    }

    /// Queues an operator's shell under their live control (`shell_relay.rs` pairs it).
    pub async fn computer_shell(
        &self,
        account_id: String,
        id: String,
        q: crate::api::shell::ShellQuery,
        relay_id: String,
    ) -> Result<CommandRow, StoreError> {
        self.change(move |c, limits| {
            super::store::control::shell(c, &account_id, &id, &q, &relay_id, limits)
        })
        .await
    }

    /// Hands a paused computer back to its model with a note.
    pub async fn control_handback(
        &self,
        account_id: String,
        id: String,
        note: String,
    ) -> Result<crate::api::computers::Control, StoreError> {
        self.change(move |c, limits| {
            super::store::control::handback(c, &account_id, &id, &note, limits)
        })
        .await
        .map(|(c, _)| c)
    }

    /// Admits a chat turn and queues it on the agent's Runner.
    /// A user's message in the session a goal came from also re-authorizes that goal when
    /// it was stopped, waiting or blocked (`goals::resume_by_chat`).
    /// A turn that cannot start yet waits in the chat queue (`turn_waits`) instead.
    pub async fn chat(&self, admission: Admission) -> Result<Chat, StoreError> {
        let chat = self
            .change(move |c, limits| {
                let chat = turn_waits::chat(c, &admission, limits)?;
                let (Chat::Started(session, _) | Chat::Queued(session, ..)) = &chat;
                super::store::goals::resume_by_chat(c, &session.id)?;
                Ok(chat)
            })
            .await?;
        self.kick();
        Ok(chat)
    }

    /// Cancels one turn of a session: a waiting one at once, an admitted one through a
    /// stop of its session (confirmed by its Runner); the session's other turns go on.
    pub async fn turn_cancel(
        &self,
        session: SessionId,
        turn: String,
    ) -> Result<(SessionRow, Option<CommandRow>), StoreError> {
        let done = self
            .change(move |c, limits| sessions::cancel_turn(c, &session, &turn, limits))
            .await?;
        self.kick();
        Ok(done)
    }

    /// `yy session stop`: the turns waiting in the session are cancelled, and its
    /// running turn is stopped.
    pub async fn session_stop_all(
        &self,
        id: SessionId,
    ) -> Result<(SessionRow, Option<CommandRow>), StoreError> {
        let done = self
            .change(move |c, limits| sessions::stop_all(c, &id, limits))
            .await?;
        self.kick();
        Ok(done)
    }

    pub async fn session_stop(
        &self,
        id: SessionId,
    ) -> Result<(SessionRow, Option<CommandRow>), StoreError> {
        self.change(move |c, limits| sessions::stop(c, &id, limits))
            .await
    }

    pub async fn session_close(
        &self,
        id: SessionId,
    ) -> Result<(SessionRow, Option<CommandRow>), StoreError> {
        self.change(move |c, limits| sessions::close(c, &id, limits))
            .await
    }

    /// Archives an agent: its queued work is refused when it would start, its running
    /// turn is stopped (its Runner confirms the stop), and its computer stops.
    pub async fn agent_archive(
        &self,
        account_id: String,
        key: String,
    ) -> Result<AgentRow, StoreError> {
        let (agent, stopped, running, browsers) = self
            .store
            .call(move |c| {
                let (agent, browsers) = agents::archive(c, &account_id, &key)?;
                let stopped = computers::stop_for_agent(c, &agent.id)?;
                let running = sessions::running_session(c, &agent.id)?;
                Ok((agent, stopped, running, browsers))
            })
            .await?;
        for runner in &browsers {
            self.wake(runner, true);
        }
        if let Some(runner) = stopped.as_ref().and_then(Touches::touches) {
            self.wake(&runner, true);
        }
        if let Some(session) = running {
            match self.session_stop(session.clone()).await {
                Ok(_) | Err(StoreError::Conflict(_)) => {}
                Err(e) => tracing::warn!(%session, error = %e, "stop of an archived agent's turn"),
            }
        }
        self.kick();
        Ok(agent)
    }

    /// Disables an account: its tokens, waiting turns, goals and controls end at once (see
    /// `accounts::disable`), and each of its running turns gets a stop that its Runner
    /// confirms. Returns the account and the stops queued.
    pub async fn account_disable(
        &self,
        username: String,
    ) -> Result<(super::store::accounts::AccountRow, Vec<CommandRow>), StoreError> {
        let (account, running) = self
            .store
            .call(move |c| super::store::accounts::disable(c, &username))
            .await?;
        let mut stops = Vec::new();
        for session in running {
            match self.session_stop(session.clone()).await {
                Ok((_, Some(stop))) => stops.push(stop),
                Ok((_, None)) => {}
                // It ended meanwhile: nothing to stop.
                Err(StoreError::Conflict(_)) => {}
                Err(e) => tracing::warn!(%session, error = %e, "stop of a disabled account's turn"),
            }
        }
        self.kick();
        Ok((account, stops))
    }

    /// `yy runner update`: may queue a `computer.image.accept` on the Runner.
    pub async fn runner_update(
        &self,
        key: String,
        image: runner_images::ImageChange,
        network: Option<crate::api::computers::NetworkMode>,
    ) -> Result<runners::RunnerRow, StoreError> {
        self.change(move |c, limits| runner_images::update(c, &key, image, network, limits))
            .await
    }

    /// Disables a Runner: its token stops working, and its long-polls end at once.
    pub async fn runner_disable(&self, key: String) -> Result<runners::RunnerRow, StoreError> {
        let row = self.store.call(move |c| runners::disable(c, &key)).await?;
        self.hub.clear(&row.id, None);
        Ok(row)
    }

    // ---- waiting ----

    /// A command, once it ended or after `wait`, whichever comes first.
    pub async fn wait_command(
        &self,
        id: CommandId,
        wait: Duration,
    ) -> Result<CommandRow, StoreError> {
        let key = id.clone();
        let first = self
            .store
            .call_unlocked(move |c| commands::get(c, &key))
            .await?;
        let (row, _) = self
            .wait_for(Some(&first.runner_id), Signal::Changed, wait, None, || {
                let id = id.clone();
                async move {
                    let row = self
                        .store
                        .call_unlocked(move |c| commands::get(c, &id))
                        .await?;
                    let ended = row.is_final();
                    Ok::<_, StoreError>((row, ended))
                }
            })
            .await?;
        Ok(row)
    }

    /// Runs `look` until it says it is ready, `wait` passed or the server shuts down; it
    /// runs again whenever a command of `runner` changes. The last look is returned.
    pub async fn wait_for_change<T, E, F, Fut>(
        &self,
        runner: Option<&str>,
        wait: Duration,
        look: F,
    ) -> Result<(T, WaitEnd), E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(T, bool), E>>,
    {
        self.wait_for(runner, Signal::Changed, wait, None, look)
            .await
    }

    /// `parked` hears once when the first look found nothing and the wait begins.
    async fn wait_for<T, E, F, Fut>(
        &self,
        runner: Option<&str>,
        signal: Signal,
        wait: Duration,
        mut parked: Option<oneshot::Sender<()>>,
        mut look: F,
    ) -> Result<(T, WaitEnd), E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(T, bool), E>>,
    {
        let deadline = tokio::time::Instant::now() + wait;
        let signals: Option<Arc<RunnerSignals>> = runner.map(|r| self.hub.signals(r));
        let mut shutdown = self.shutdown.clone();
        loop {
            // Register for wake-ups before looking, so a change in between is not missed.
            let notified = signals.as_ref().map(|s| match signal {
                Signal::Work => s.work.notified(),
                Signal::Changed => s.done.notified(),
            });
            let mut notified = notified.map(Box::pin);
            if let Some(n) = notified.as_mut() {
                n.as_mut().enable();
            }
            let (found, ready) = look().await?;
            if ready {
                return Ok((found, WaitEnd::Ready));
            }
            if *shutdown.borrow() {
                return Ok((found, WaitEnd::ShuttingDown));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok((found, WaitEnd::TimedOut));
            }
            if let Some(p) = parked.take() {
                let _ = p.send(());
            }
            let woken = async {
                match notified {
                    Some(n) => n.await,
                    // Nothing to wake on (a session that never reached a Runner): poll.
                    None => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = shutdown.changed() => {}
            }
        }
    }

    // ---- the machine side: Runners ----

    /// Refuses a request of an instance whose generation is not the live one; writes
    /// `last_seen_at` now and then while a Runner keeps polling.
    pub async fn check_live(
        &self,
        runner_id: &RunnerId,
        generation: Generation,
        instance: &str,
    ) -> Result<(), QueueError> {
        let signals = self.hub.signals(runner_id);
        signals
            .check(generation, instance)
            .map_err(|e| generation_error(e, generation))?;
        if signals.should_touch() {
            let id = runner_id.clone();
            self.store.call(move |c| runners::touch(c, &id)).await?;
        }
        Ok(())
    }

    /// A new generation for a Runner instance: turns of the ended generation become
    /// uncertain with their commands, and its computer leases end.
    pub async fn connect(
        &self,
        runner_id: &RunnerId,
        instance: &str,
        status: RunnerStatus,
        takeover: commands::Takeover,
    ) -> Result<Connected, QueueError> {
        let (id, inst) = (runner_id.clone(), instance.to_string());
        let connected = self
            .store
            .call(move |c| {
                let connected = commands::connect(c, &id, &inst, &status, &takeover)?;
                computers::end_leases(c, &id, connected.generation)?;
                commands::settle(c, None)?;
                Ok(connected)
            })
            .await?;
        self.hub.set_live(runner_id, connected.generation, instance);
        self.wake(runner_id, true);
        Ok(connected)
    }

    pub async fn disconnect(
        &self,
        runner_id: &RunnerId,
        generation: Generation,
    ) -> Result<(), QueueError> {
        let id = runner_id.clone();
        self.store
            .call(move |c| runners::disconnect(c, &id, generation))
            .await?;
        self.hub.clear(runner_id, Some(generation));
        Ok(())
    }

    /// Long-poll: up to `max` commands as soon as there are any, or none after `wait`.
    /// `parked` hears when the first look found nothing and the wait begins.
    pub async fn lease(
        &self,
        runner_id: &RunnerId,
        generation: Generation,
        instance: &str,
        max: u32,
        wait: Duration,
        parked: Option<oneshot::Sender<()>>,
    ) -> Result<Vec<LeasedCommand>, QueueError> {
        let _open = self.hub.signals(runner_id).polling();
        let (leased, end) = self
            .wait_for(Some(runner_id), Signal::Work, wait, parked, || {
                self.lease_now(runner_id, generation, instance, max)
            })
            .await?;
        match end {
            WaitEnd::ShuttingDown => Err(QueueError::ShuttingDown),
            WaitEnd::Ready | WaitEnd::TimedOut => Ok(leased),
        }
    }

    /// In one database call: the Runner may have been disabled or replaced meanwhile; if
    /// not, lease. The generation is checked against the database too: a connect that
    /// committed first has already requeued what an older generation would take, so an
    /// older generation must take nothing. On PostgreSQL the lease runs beside the other
    /// replicas' transactions, with `FOR UPDATE SKIP LOCKED`
    /// ([`commands::lease_skipping_locked`]); when a worker turn is waiting it leases
    /// again under the store's lock.
    async fn lease_now(
        &self,
        runner_id: &RunnerId,
        generation: Generation,
        instance: &str,
        max: u32,
    ) -> Result<(Vec<LeasedCommand>, bool), QueueError> {
        // Relaxed: a lease a power loss takes back is leased again under the next
        // generation, and the Runner's receipts keep it from running twice.
        let apart = self.lease_call(runner_id, generation, instance, max, true);
        if let Some(answer) = self.store.call_apart_relaxed(apart).await?? {
            return Ok(answer);
        }
        let locked = self.lease_call(runner_id, generation, instance, max, false);
        match self.store.call_relaxed(locked).await?? {
            Some(answer) => Ok(answer),
            None => Err(QueueError::Store(StoreError::Task(
                "a lease under the store's lock gave no answer".into(),
            ))),
        }
    }

    /// [`Queue::lease_now`]'s database call: the leased commands and whether the answer
    /// has anything for the Runner, or `None` when `apart` and a worker turn is waiting.
    fn lease_call(
        &self,
        runner_id: &RunnerId,
        generation: Generation,
        instance: &str,
        max: u32,
        apart: bool,
    ) -> impl FnOnce(&mut Db) -> Result<LeaseAnswer, StoreError> + Send + 'static {
        let (id, instance) = (runner_id.clone(), instance.to_string());
        let hub = self.hub.clone();
        move |c| {
            let Some((disabled_at, stored)) = runners::fence(c, &id)? else {
                return Ok(Err(QueueError::Disabled(id)));
            };
            if disabled_at.is_some() {
                return Ok(Err(QueueError::Disabled(id)));
            }
            if let Err(e) = hub.signals(&id).check(generation, &instance) {
                return Ok(Err(generation_error(e, generation)));
            }
            if stored != generation.get() {
                return Ok(Err(QueueError::StaleGeneration(generation)));
            }
            if max == 0 {
                return Ok(Ok(Some((Vec::new(), false))));
            }
            let max = max.min(256);
            let leased = if apart {
                match commands::lease_skipping_locked(c, &id, generation, max)? {
                    Some(leased) => leased,
                    None => return Ok(Ok(None)),
                }
            } else {
                commands::lease(c, &id, generation, max)?
            };
            // An admin's `rotate-token` answers the long-poll too: the lease answer
            // carries the request.
            let any = !leased.is_empty() || super::store::runner_tokens::rotation_waiting(c, &id)?;
            Ok(Ok(Some((leased, any))))
        }
    }

    /// The re-check before a Runner executes a command; returns its deadline.
    pub async fn start(
        &self,
        runner_id: &RunnerId,
        generation: Generation,
        id: CommandId,
    ) -> Result<i64, QueueError> {
        let runner = runner_id.clone();
        // Relaxed as the lease: the outcome that follows is durable and takes the start
        // down with it; a start a power loss takes back ends as the lease does.
        let decision = self
            .store
            .call_relaxed(move |c| Ok(commands::start(c, &runner, generation, &id)))
            .await?;
        self.wake(runner_id, false);
        Ok(decision?)
    }

    /// Records an outcome and settles what the command drives.
    pub async fn complete(
        &self,
        runner_id: &RunnerId,
        generation: Generation,
        id: CommandId,
        outcome: Outcome,
        result: Option<String>,
        error: Option<String>,
    ) -> Result<CommandRow, QueueError> {
        let runner = runner_id.clone();
        let row = self
            .store
            .call(move |c| {
                let row = commands::complete(
                    c,
                    &runner,
                    generation,
                    &id,
                    outcome,
                    result.as_deref(),
                    error.as_deref(),
                )?;
                commands::settle(c, Some(row.kind))?;
                Ok(row)
            })
            .await?;
        self.wake(runner_id, false);
        Ok(row)
    }

    /// Events of a running turn, as the Runner streams them.
    pub async fn append_events(
        &self,
        runner_id: &RunnerId,
        generation: Generation,
        command_id: CommandId,
        events: Vec<TurnEvent>,
    ) -> Result<(), QueueError> {
        let runner = runner_id.clone();
        self.store
            .call(move |c| sessions::append_events(c, &runner, generation, &command_id, &events))
            .await?;
        self.wake(runner_id, false);
        Ok(())
    }

    /// Expires and settles commands whose deadlines passed, every second until dropped.
    pub async fn sweep_forever(self, retention: Duration, files: super::artifacts::Files) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        // Compaction scans tables: often enough for the retention, at most once a second.
        let every = (retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let mut last_compaction = tokio::time::Instant::now();
        loop {
            tick.tick().await;
            if !self.leads() {
                continue;
            }
            if last_compaction.elapsed() >= every {
                last_compaction = tokio::time::Instant::now();
                self.compact(retention_ms, &files).await;
            }
            let swept = self
                .store
                .call(|c| {
                    let runners = commands::sweep(c)?;
                    commands::settle(c, None)?;
                    Ok(runners)
                })
                .await;
            match swept {
                Ok(runners) => {
                    for r in runners {
                        self.wake(&r, false);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "command sweep failed"),
            }
            // Idle computers give their slots back (on its own: a failed sweep must not
            // keep a pool full).
            match self
                .store
                .call(|c| computer_idle::reclaim(c, crate::timefmt::now_ms()))
                .await
            {
                Ok(runners) => {
                    for r in runners {
                        self.wake(&r, false);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "idle computer pass failed"),
            }
        }
    }

    /// Whether the Runner holds a live connection now. With replicas, a Runner connected
    /// to another one is not known here: callers then go by what the database says
    /// (`RunnerRow::online`, from the last time it was seen polling).
    pub fn is_live(&self, runner_id: &RunnerId) -> bool {
        self.peers.is_some() || self.hub.is_live(runner_id)
    }

    /// Deletes what the retention no longer keeps and gives the space back.
    async fn compact(&self, retention_ms: i64, files: &super::artifacts::Files) {
        let done = self
            .store
            .call_alone(move |c| {
                // Alone: the WAL checkpoint of give_back_space cannot run inside a transaction.
                let compacted = retention::compact(c, retention_ms, crate::timefmt::now_ms())?;
                // Bounded per call; whatever is left goes at the next compaction.
                retention::give_back_space(c)?;
                Ok(compacted)
            })
            .await;
        match done {
            Ok(c) if c.any() => {
                files.remove(&c.artifacts);
                tracing::info!(
                    commands = c.commands,
                    events = c.events,
                    results = c.results,
                    artifacts = c.artifacts.len(),
                    "retention: deleted old data"
                )
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "retention sweep failed"),
        }
    }

    /// Records that a final command's result was delivered (big ones are dropped later).
    pub async fn delivered(&self, command_id: CommandId) -> Result<(), StoreError> {
        self.store
            .call(move |c| retention::mark_delivered(c, &command_id, crate::timefmt::now_ms()))
            .await
    }

    /// Long-polls of Runners open right now.
    pub fn open_polls(&self) -> usize {
        self.hub.open_polls()
    }

    /// Runners connected right now.
    pub fn live_count(&self) -> usize {
        self.hub.live_count()
    }
}

fn generation_error(e: GenerationError, generation: Generation) -> QueueError {
    match e {
        GenerationError::Stale => QueueError::StaleGeneration(generation),
        GenerationError::Replaced { instance } => QueueError::Replaced(instance),
    }
}

/// The Runner whose queue a state change touched, if any.
trait Touches {
    fn touches(&self) -> Option<RunnerId>;
}

impl Touches for runners::RunnerRow {
    fn touches(&self) -> Option<RunnerId> {
        Some(self.id.clone())
    }
}

impl Touches for CommandRow {
    fn touches(&self) -> Option<RunnerId> {
        Some(self.runner_id.clone())
    }
}

impl Touches for (ComputerRow, Option<CommandRow>) {
    fn touches(&self) -> Option<RunnerId> {
        Some(self.0.runner_id.clone())
    }
}

impl Touches for (SessionRow, Option<CommandRow>) {
    fn touches(&self) -> Option<RunnerId> {
        let queued = self.1.as_ref().map(|c| &c.runner_id);
        queued.or(self.0.runner_id.as_ref()).cloned()
    }
}

impl Touches for Chat {
    fn touches(&self) -> Option<RunnerId> {
        match self {
            Chat::Started(_, turn) => Some(turn.runner_id.clone()),
            Chat::Queued(..) => None,
        }
    }
}

impl Touches for (crate::api::computers::Control, Option<CommandRow>) {
    fn touches(&self) -> Option<RunnerId> {
        self.1.as_ref().map(|c| c.runner_id.clone())
    }
}

impl Touches for Cancelled {
    fn touches(&self) -> Option<RunnerId> {
        let (Cancelled::Dequeued(row) | Cancelled::Requested(row)) = self;
        Some(row.runner_id.clone())
    }
}
