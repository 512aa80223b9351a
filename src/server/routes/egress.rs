//! The egress log of a Runner: the admin API queues an `egress.log` command and the Runner
//! answers with its recent proxy decisions (kept in a bounded ring on the Runner).

use axum::Json;
use axum::extract::{Path, State};

use crate::api::machine::{self, RunnerCommand};
use crate::egress::{LOG_CAPACITY, LogParams, LogQuery};
use crate::server::AppState;
use crate::server::auth::Admin;
use crate::server::error::ApiError;
use crate::server::extract::Body;
use crate::server::store::{StoreError, computers, runners};

pub async fn runner_egress_log(
    State(state): State<AppState>,
    _: Admin,
    Path(id): Path<String>,
    Body(p): Body<LogParams>,
) -> Result<Json<machine::Command>, ApiError> {
    let limit = p.limit.unwrap_or(100);
    if limit == 0 || limit as usize > LOG_CAPACITY {
        return Err(ApiError::bad_request(format!(
            "the limit must be between 1 and {LOG_CAPACITY}"
        )));
    }
    // A computer is named by id or prefix; the Runner only knows full ids.
    let key = id.clone();
    let computer_id = state
        .store
        .call(move |c| {
            let runner = runners::get(c, &key)?;
            let Some(computer) = p.computer else {
                return Ok(None);
            };
            let row = computers::get(c, &computer)?;
            if row.runner_id != runner.id {
                return Err(StoreError::Invalid(format!(
                    "computer {} runs on runner {}, not on {}",
                    row.id, row.runner_id, runner.id
                )));
            }
            Ok(Some(row.id))
        })
        .await?;
    let query = RunnerCommand::EgressLog(LogQuery {
        computer_id: computer_id.map(String::from),
        limit: Some(limit),
    });
    let row = state.queue.enqueue(id, query, None).await?;
    Ok(Json(row.view(false)))
}
