//! Image updates of a Runner's computers. `yy runner update --computer-image NEW` (or
//! `--rollback`, which targets the previous image) records NEW as *pending*, not current,
//! and queues a `computer.image.accept` command: the Runner checks the image on its Docker
//! engine and runs a throw-away acceptance computer (state `verifying`). A refusal (or a
//! command that failed, expired or was cancelled) drops the pending image and says why in
//! `image_note`; the current image stays. An accepted image (state `accepted`) becomes
//! current as soon as the Runner is *idle*, and the image it replaces becomes the previous.
//!
//! Idle: none of the Runner's commands that run in or start a computer is queued, leased
//! or running, i.e. no `worker.turn` (a computer agent's turn) and no `computer.start`,
//! `computer.exec` or `computer.screen`. Stops, pauses and everything else do not count.
//! This is decided here, on the control plane, which knows every such command: the check
//! runs in the same transaction as each outcome that may end the last one ([`settle`]).
//! Nothing is drained: new turns are still admitted, so a Runner that never has a gap
//! keeps its image until it has one.
//!
//! Running computers keep the image they run; the lease of a turn on a running computer
//! carries that image (sessions::admit_turn), so a computer moves to the current image only
//! when it is started again (after a stop, or when its container is gone), workspace kept.

use super::db::{Db, Row};
use rusqlite::params;

use super::commands::{self, QueueLimits};
use super::{StoreError, computers, runners};
use crate::api::computers::{ImageAcceptPayload, NetworkMode};
use crate::api::machine::RunnerCommand;
use crate::api::states::CommandState;
use crate::api::views::PendingImageState;

/// The commands that keep a Runner busy (see the module comment), as SQL over
/// `runner_commands c`.
macro_rules! busy_sql {
    () => {
        "c.state IN ('pending', 'leased', 'running')
         AND c.kind IN ('worker.turn', 'computer.start', 'computer.exec', 'computer.screen')"
    };
}
pub(crate) use busy_sql;

/// A Runner's image update state, as stored (and the busy counts while it waits).
#[derive(Debug, Clone, Default)]
pub struct ImageUpdate {
    pub previous_image: Option<String>,
    pub pending_image: Option<String>,
    /// `verifying` or `accepted`.
    pub pending_state: Option<PendingImageState>,
    pub pending_command: Option<String>,
    /// The last update's outcome: why it was refused, or what was switched.
    pub note: Option<String>,
    /// While accepted: (turns, other computer commands) in flight.
    pub busy: Option<(i64, i64)>,
}

impl ImageUpdate {
    /// Reads the columns from `at` on (runners::SELECT).
    pub(crate) fn from_row(r: &Row<'_>, at: usize) -> rusqlite::Result<ImageUpdate> {
        let busy: Option<String> = r.get(at + 5)?;
        Ok(ImageUpdate {
            previous_image: r.get(at)?,
            pending_image: r.get(at + 1)?,
            pending_state: r.get(at + 2)?,
            pending_command: r.get(at + 3)?,
            note: r.get(at + 4)?,
            busy: busy.and_then(|b| serde_json::from_str::<(i64, i64)>(&b).ok()),
        })
    }

    /// Why the pending image is not current yet, in words.
    pub fn reason(&self) -> Option<String> {
        match self.pending_state? {
            PendingImageState::Verifying => Some(format!(
                "verifying on the Runner (command {})",
                self.pending_command.as_deref().unwrap_or("-")
            )),
            PendingImageState::Accepted => {
                let (turns, others) = self.busy.unwrap_or((0, 0));
                Some(match waiting_for(turns, others) {
                    Some(what) => format!("accepted; waiting for {what}"),
                    None => "accepted; switching now".into(),
                })
            }
        }
    }
}

/// "1 running turn and 2 computer commands", or None when nothing is in flight.
pub fn waiting_for(turns: i64, others: i64) -> Option<String> {
    let mut parts = Vec::new();
    if turns > 0 {
        parts.push(crate::api::words::plural(
            turns,
            "running turn",
            "running turns",
        ));
    }
    if others > 0 {
        parts.push(crate::api::words::plural(
            others,
            "computer command",
            "computer commands",
        ));
    }
    (!parts.is_empty()).then(|| parts.join(" and "))
}

/// What `yy runner update` asks for the image.
pub enum ImageChange {
    Keep,
    To(String),
    Rollback,
}

/// Changes how a Runner's next computers start, in one transaction: the network mode at
/// once; a new image (a full id, checked by the caller) or the previous one (`Rollback`)
/// becomes pending and a `computer.image.accept` is queued.
pub fn update(
    conn: &mut Db,
    key: &str,
    image: ImageChange,
    network: Option<NetworkMode>,
    limits: QueueLimits,
) -> Result<runners::RunnerRow, StoreError> {
    let tx = conn.savepoint()?;
    let runner = runners::get(&tx, key)?;
    if let Some(network) = network {
        tx.execute(
            "UPDATE runners SET network = ?2 WHERE id = ?1",
            params![runner.id, network.as_str()],
        )?;
    }
    let target = match image {
        ImageChange::Keep => None,
        ImageChange::To(image) => Some(image),
        ImageChange::Rollback => Some(runner.images.previous_image.clone().ok_or_else(|| {
            StoreError::Invalid(format!(
                "runner {} has no previous image to roll back to",
                runner.id
            ))
        })?),
    };
    if let Some(image) = target {
        request(&tx, &runner, &image, limits)?;
    }
    let runner = runners::get(&tx, &runner.id)?;
    tx.commit()?;
    Ok(runner)
}

fn request(
    tx: &Db,
    runner: &runners::RunnerRow,
    image: &str,
    limits: QueueLimits,
) -> Result<(), StoreError> {
    if runner.computer_image.as_deref() == Some(image) {
        return Err(StoreError::Conflict(format!(
            "image {image} is already runner {}'s current image",
            runner.id
        )));
    }
    if runner.images.pending_state == Some(PendingImageState::Verifying) {
        return Err(StoreError::Conflict(format!(
            "runner {} is verifying image {} (command {}); wait until it is accepted or refused (`yy runner show {}`)",
            runner.id,
            runner.images.pending_image.as_deref().unwrap_or("-"),
            runner.images.pending_command.as_deref().unwrap_or("-"),
            runner.id
        )));
    }
    if !runner
        .capabilities
        .iter()
        .any(|c| c == crate::api::capabilities::COMPUTER)
    {
        return Err(StoreError::Invalid(format!(
            "runner {} cannot check images now (it is offline, or reported no Docker engine); start it and try again",
            runner.id
        )));
    }
    // An accepted image still waiting for the Runner to be idle is replaced.
    let accept = RunnerCommand::ComputerImageAccept(ImageAcceptPayload {
        image_id: image.to_string(),
    });
    let cmd = commands::enqueue_in(tx, &runner.id, &accept, None, limits)?;
    tx.execute(
        "UPDATE runners SET pending_image = ?2, pending_state = 'verifying', pending_command = ?3,
             image_note = NULL
         WHERE id = ?1",
        params![runner.id, image, cmd.id],
    )?;
    Ok(())
}

/// Image updates follow their acceptance commands' outcomes, and an accepted image becomes
/// current on a Runner that is idle. Runs after every outcome that may change either
/// (commands::settle). Returns the Runners whose image was switched.
pub fn settle(conn: &mut Db) -> Result<Vec<String>, StoreError> {
    // Almost always nothing is pending: one read, no write transaction.
    let any: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM runners WHERE pending_state IS NOT NULL)")?
        .query_row([], |r| r.get(0))?;
    if !any {
        return Ok(Vec::new());
    }
    let tx = conn.savepoint()?;
    let ended: Vec<(String, String, CommandState, Option<String>)> = {
        let mut stmt = tx.prepare_cached(&format!(
            "SELECT r.id, r.pending_image, c.state, c.error
             FROM runners r JOIN runner_commands c ON c.id = r.pending_command
             WHERE r.pending_state = 'verifying' AND c.state IN {}",
            CommandState::final_sql()
        ))?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
            .collect::<Result<_, _>>()?
    };
    for (runner, image, state, error) in ended {
        if state == CommandState::Done {
            tx.execute(
                "UPDATE runners SET pending_state = 'accepted' WHERE id = ?1",
                [&runner],
            )?;
        } else {
            let why = error.unwrap_or_else(|| format!("the acceptance command ended {state}"));
            tx.execute(
                "UPDATE runners SET pending_image = NULL, pending_state = NULL,
                     pending_command = NULL, image_note = ?2
                 WHERE id = ?1",
                params![runner, format!("{image} was not made current: {why}")],
            )?;
        }
    }
    let switched: Vec<String> = {
        let mut stmt = tx.prepare_cached(concat!(
            "UPDATE runners SET previous_image = computer_image, computer_image = pending_image,
                 pending_image = NULL, pending_state = NULL, pending_command = NULL,
                 image_note = 'made current at ' || ?1
                     || ', replacing ' || coalesce(computer_image, 'no image')
             WHERE pending_state = 'accepted' AND NOT EXISTS (
                 SELECT 1 FROM runner_commands c WHERE c.runner_id = runners.id AND ",
            busy_sql!(),
            ") RETURNING id"
        ))?;
        stmt.query_map([crate::timefmt::rfc3339(crate::timefmt::now_ms())], |r| {
            r.get(0)
        })?
        .collect::<Result<_, _>>()?
    };
    tx.commit()?;
    for runner in &switched {
        tracing::info!(%runner, "a new computer image is current");
    }
    Ok(switched)
}

/// The image a turn's lease carries: a running computer keeps the image it runs (it moves
/// to the Runner's current image only when it starts again); any other starts from the
/// current one.
pub fn lease_image<'a>(computer: &'a computers::ComputerRow, current: &'a str) -> &'a str {
    if computer.state == crate::api::states::ComputerState::Running {
        &computer.image_id
    } else {
        current
    }
}

/// Every image a Runner must keep on its engine: current, pending and previous (image
/// removal refuses them).
pub fn kept(runner: &runners::RunnerRow) -> Vec<(String, &'static str)> {
    let mut kept = Vec::new();
    if let Some(i) = &runner.computer_image {
        kept.push((i.clone(), "current"));
    }
    if let Some(i) = &runner.images.pending_image {
        kept.push((i.clone(), "pending"));
    }
    if let Some(i) = &runner.images.previous_image {
        kept.push((i.clone(), "previous"));
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_said_in_words() {
        assert_eq!(waiting_for(0, 0), None);
        assert_eq!(waiting_for(1, 0).unwrap(), "1 running turn");
        assert_eq!(
            waiting_for(2, 1).unwrap(),
            "2 running turns and 1 computer command"
        );
        let mut u = ImageUpdate {
            pending_state: Some(PendingImageState::Accepted),
            busy: Some((1, 0)),
            ..Default::default()
        };
        assert_eq!(u.reason().unwrap(), "accepted; waiting for 1 running turn");
        u.pending_state = None;
        assert_eq!(u.reason(), None);
    }

    /// The store's side of an update: pending while verified, accepted but held while a
    /// computer command is in flight, switched when the last one ends; a refused rollback
    /// drops the pending image and says why.
    #[test]
    fn an_accepted_image_waits_for_idle_and_a_refused_one_is_dropped() {
        use crate::api::machine::Outcome;
        use crate::server::store::tests::world;
        const NEW: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
        let mut w = world();
        let generation = w.connect();
        let current = runners::get(&w.conn, &w.runner)
            .unwrap()
            .computer_image
            .unwrap();
        let limits = QueueLimits::default();
        assert!(matches!(
            update(&mut w.conn, &w.runner, ImageChange::Rollback, None, limits),
            Err(StoreError::Invalid(m)) if m.contains("no previous image")
        ));
        assert!(matches!(
            update(
                &mut w.conn,
                &w.runner,
                ImageChange::To(current.clone()),
                None,
                limits
            ),
            Err(StoreError::Conflict(_))
        ));
        let r = update(
            &mut w.conn,
            &w.runner,
            ImageChange::To(NEW.into()),
            None,
            limits,
        )
        .unwrap();
        assert_eq!(r.images.pending_state, Some(PendingImageState::Verifying));
        let accept = crate::api::ids::CommandId::from(r.images.pending_command.clone().unwrap());
        assert!(matches!(
            update(&mut w.conn, &w.runner, ImageChange::To(NEW.into()), None, limits),
            Err(StoreError::Conflict(m)) if m.contains("verifying")
        ));

        // A computer starting keeps the Runner busy past the acceptance.
        let (computer, start) = computers::create(&mut w.conn, &w.account, "box", limits).unwrap();
        let start = start.unwrap();
        w.run(generation, &accept);
        w.complete(generation, &accept, Outcome::Done).unwrap();
        let r = runners::get(&w.conn, &w.runner).unwrap();
        assert_eq!(r.computer_image.as_deref(), Some(current.as_str()));
        assert_eq!(
            r.images.reason().unwrap(),
            "accepted; waiting for 1 computer command"
        );
        w.run(generation, &start.id);
        w.complete(generation, &start.id, Outcome::Done).unwrap();
        let r = runners::get(&w.conn, &w.runner).unwrap();
        assert_eq!(r.computer_image.as_deref(), Some(NEW));
        assert_eq!(r.images.previous_image.as_deref(), Some(current.as_str()));
        assert_eq!(r.images.pending_image, None);

        // The running computer keeps its image; its next start takes the new one.
        let c = computers::get(&w.conn, &computer.id).unwrap();
        assert_eq!(lease_image(&c, NEW), current);
        let view: crate::api::computers::Computer = c.into();
        assert_eq!(view.next_image.as_deref(), Some(NEW));

        // A rollback the Runner refuses: dropped with the reason, the current stays.
        let r = update(&mut w.conn, &w.runner, ImageChange::Rollback, None, limits).unwrap();
        assert_eq!(r.images.pending_image.as_deref(), Some(current.as_str()));
        let accept = crate::api::ids::CommandId::from(r.images.pending_command.unwrap());
        w.run(generation, &accept);
        let row = commands::complete(
            &mut w.conn,
            &w.runner,
            generation,
            &accept,
            Outcome::Failed,
            None,
            Some("image refused: uid:gid: want 1000:1000, got 0:0"),
        )
        .unwrap();
        commands::settle(&mut w.conn, Some(row.kind)).unwrap();
        let r = runners::get(&w.conn, &w.runner).unwrap();
        assert_eq!(r.computer_image.as_deref(), Some(NEW));
        assert_eq!(r.images.pending_image, None);
        assert!(r.images.note.unwrap().contains("uid:gid"));
    }
}
