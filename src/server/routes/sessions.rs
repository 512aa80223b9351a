//! Bot sessions over the admin API: `yy chat`, `yy session ...`.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::api::ids::SessionId;
use crate::api::sessions as wire;
use crate::api::states::TurnState;
use crate::server::AppState;
use crate::server::auth::Caller;
use crate::server::error::ApiError;
use crate::server::extract::{Body, Q};
use crate::server::store::sessions::{self, Admission, SessionRow};
use crate::server::store::turn_waits::{self, Chat};
use crate::server::store::{StoreError, agents, ids};

/// Largest chat message accepted.
const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// A session is visible to its owner and to admins.
fn check_access(caller: &Caller, session: &SessionRow) -> Result<(), ApiError> {
    if caller.account.admin || caller.account.id == session.account_id {
        Ok(())
    } else {
        Err(ApiError::not_found(format!("no session {:?}", session.id)))
    }
}

async fn load(state: &AppState, caller: &Caller, id: String) -> Result<SessionRow, ApiError> {
    // A person may give a unique prefix; everything after this uses the full id.
    let account = (!caller.account.admin).then(|| caller.account.id.clone());
    let session = state
        .store
        .call(move |c| {
            let id = ids::resolve_for(c, ids::Kind::Session, &id, account.as_deref())?;
            sessions::get(c, &id.into())
        })
        .await?;
    check_access(caller, &session)?;
    Ok(session)
}

/// The session with its turns, read in one store call: a turn that settles between two
/// calls would otherwise show as ended while its session still reads as running.
async fn transcript(state: &AppState, id: SessionId) -> Result<wire::Session, ApiError> {
    let (session, turns) = state
        .store
        .call(move |c| {
            let session = sessions::get(c, &id)?;
            let mut turns = sessions::turns(c, &id)?
                .into_iter()
                .map(|t| {
                    let tools = sessions::tool_calls(c, &t.id)?;
                    Ok(t.view(tools))
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            // Then the turns that have not started: waiting (in the order they will
            // start), or ended without starting (cancelled, refused).
            turns.extend(
                turn_waits::of_session(c, &id)?
                    .into_iter()
                    .map(|w| w.view()),
            );
            Ok((session, turns))
        })
        .await?;
    Ok(session.view(Some(turns)))
}

/// 200 with the turn when it starts at once; 202 with the waiting turn and its place in
/// the queue when it cannot start yet.
pub async fn chat_create(
    State(state): State<AppState>,
    caller: Caller,
    Body(p): Body<wire::ChatParams>,
) -> Result<(StatusCode, Json<wire::ChatStarted>), ApiError> {
    if p.message.trim().is_empty() {
        return Err(ApiError::bad_request("the message is empty"));
    }
    if p.message.len() > MAX_MESSAGE_BYTES {
        return Err(ApiError::bad_request(format!(
            "the message is larger than {} KiB",
            MAX_MESSAGE_BYTES / 1024
        )));
    }
    let session = match p.session {
        Some(s) => Some(load(&state, &caller, s).await?.id),
        None => None,
    };
    let chat = state
        .queue
        .chat(Admission {
            account_id: caller.account.id.clone(),
            admin: caller.account.admin,
            agent: p.agent,
            session,
            message: p.message,
            attachments: p.attachments,
            inputs: Vec::new(),
        })
        .await?;
    Ok(match chat {
        Chat::Started(session, turn) => (
            StatusCode::OK,
            Json(wire::ChatStarted {
                session: session.view(None),
                turn: turn.view(Vec::new()),
                queued: None,
            }),
        ),
        Chat::Queued(session, wait, ahead) => {
            let queued = wire::Queued {
                position: ahead + 1,
                ahead,
                reason: wait.reason.clone(),
            };
            (
                StatusCode::ACCEPTED,
                Json(wire::ChatStarted {
                    session: session.view(None),
                    turn: wait.view(),
                    queued: Some(queued),
                }),
            )
        }
    })
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionListQuery {
    pub agent: Option<String>,
}

pub async fn session_list(
    State(state): State<AppState>,
    caller: Caller,
    Q(q): Q<SessionListQuery>,
) -> Result<Json<Vec<wire::Session>>, ApiError> {
    let account_id = caller.account.id.clone();
    let rows = state
        .store
        .call(move |c| {
            let agent = match &q.agent {
                Some(a) => Some(agents::get(c, &account_id, a)?.id),
                None => None,
            };
            sessions::list(c, agent.as_deref())
        })
        .await?;
    Ok(Json(
        rows.into_iter()
            .filter(|s| check_access(&caller, s).is_ok())
            .map(|s| s.view(None))
            .collect(),
    ))
}

pub async fn session_show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<wire::Session>, ApiError> {
    let session = load(&state, &caller, id).await?;
    Ok(Json(transcript(&state, session.id).await?))
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    #[serde(default)]
    pub after: i64,
    #[serde(default)]
    pub wait_ms: u64,
    /// The turn to report on (default: the newest).
    pub turn: Option<String>,
}

/// Long-poll: events after `after`, answering as soon as there are any or the turn ended.
pub async fn session_events(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Q(q): Q<EventsQuery>,
) -> Result<Json<wire::EventsPage>, ApiError> {
    let session = load(&state, &caller, id).await?;
    let id = session.id.clone();
    let wait = Duration::from_millis(q.wait_ms.min(30_000));
    let (page, _) = state
        .queue
        .wait_for_change(session.runner_id.as_deref(), wait, || {
            let (sid, after, turn_key) = (id.clone(), q.after, q.turn.clone());
            let store = state.store.clone();
            async move {
                let (session_state, events, turn, queued) = store
                    .call(move |c| {
                        let session = sessions::get(c, &sid)?;
                        let events = sessions::events_after(c, &sid, after)?;
                        // A turn in the chat queue is not a session turn until it starts.
                        let wait = match &turn_key {
                            Some(t) => turn_waits::find(c, t)?.filter(|w| w.session_id == sid),
                            None => None,
                        };
                        if let Some(w) = wait {
                            let queued = if w.is_waiting() {
                                let ahead = turn_waits::ahead(c, &w)?;
                                let q = wire::Queued {
                                    position: ahead + 1,
                                    ahead,
                                    reason: w.reason.clone(),
                                };
                                Some(q.line())
                            } else {
                                None
                            };
                            return Ok((session.state, events, Some(w.view()), queued));
                        }
                        let turn = match turn_key {
                            Some(t) => Some(sessions::get_turn(c, &t)?),
                            None => sessions::turns(c, &sid)?.pop(),
                        };
                        Ok((
                            session.state,
                            events,
                            turn.map(|t| t.view(Vec::new())),
                            None,
                        ))
                    })
                    .await?;
                let ready = !events.is_empty() || turn.as_ref().is_none_or(|t| t.is_final());
                let page = wire::EventsPage {
                    events,
                    session_state,
                    turn,
                    waiting: queued,
                };
                Ok::<_, ApiError>((page, ready))
            }
        })
        .await?;
    let waiting = page.waiting.clone().or_else(|| {
        let turn = page
            .turn
            .as_ref()
            .filter(|t| t.state == TurnState::Queued)?;
        let runner = turn.runner_id.as_ref()?;
        Some(super::commands::runner_wait(&state, runner, "the turn"))
    });
    Ok(Json(wire::EventsPage { waiting, ..page }))
}

pub async fn session_stop(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<wire::StopStarted>, ApiError> {
    let id = load(&state, &caller, id).await?.id;
    let (session, command) = state.queue.session_stop_all(id).await?;
    Ok(Json(wire::StopStarted {
        session: session.view(None),
        command_id: command.map(|c| c.id),
    }))
}

/// Cancels one turn (Ctrl-C in `yy chat`): a waiting one at once; a started one is
/// stopped like `session stop`, leaving the turns queued behind it.
pub async fn turn_cancel(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, turn)): Path<(String, String)>,
) -> Result<Json<wire::StopStarted>, ApiError> {
    let id = load(&state, &caller, id).await?.id;
    let (session, command) = state.queue.turn_cancel(id, turn).await?;
    Ok(Json(wire::StopStarted {
        session: session.view(None),
        command_id: command.map(|c| c.id),
    }))
}

pub async fn session_close(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<wire::StopStarted>, ApiError> {
    let id = load(&state, &caller, id).await?.id;
    let (session, command) = state.queue.session_close(id).await?;
    Ok(Json(wire::StopStarted {
        session: session.view(None),
        command_id: command.map(|c| c.id),
    }))
}
