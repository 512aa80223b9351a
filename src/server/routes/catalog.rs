//! Sources and profiles.

use axum::Json;
use axum::extract::{Path, State};

use super::{ListQuery, check_name, many, one};
use crate::api::{params, views};
use crate::server::AppState;
use crate::server::auth::Admin;
use crate::server::error::ApiError;
use crate::server::extract::{Body, Q};
use crate::server::store::catalog;

pub async fn source_list(
    State(state): State<AppState>,
    _: Admin,
    Q(q): Q<ListQuery>,
) -> Result<Json<Vec<views::Source>>, ApiError> {
    many(&state, move |c| catalog::list_sources(c, q.archived)).await
}

pub async fn source_show(
    State(state): State<AppState>,
    _: Admin,
    Path(name): Path<String>,
) -> Result<Json<views::Source>, ApiError> {
    one(&state, move |c| catalog::get_source(c, &name)).await
}

pub async fn source_create(
    State(state): State<AppState>,
    _: Admin,
    Body(p): Body<params::SourceCreate>,
) -> Result<Json<views::Source>, ApiError> {
    check_name("source", &p.name)?;
    check_description(&p.description)?;
    one(&state, move |c| {
        catalog::create_source(c, &p.name, &p.description)
    })
    .await
}

pub async fn source_update(
    State(state): State<AppState>,
    _: Admin,
    Path(name): Path<String>,
    Body(p): Body<params::SourceUpdate>,
) -> Result<Json<views::Source>, ApiError> {
    if let Some(d) = &p.description {
        check_description(d)?;
    }
    one(&state, move |c| {
        catalog::update_source(c, &name, p.description.as_deref())
    })
    .await
}

pub async fn source_archive(
    State(state): State<AppState>,
    _: Admin,
    Path(name): Path<String>,
) -> Result<Json<views::Source>, ApiError> {
    one(&state, move |c| catalog::archive_source(c, &name)).await
}

fn check_description(d: &str) -> Result<(), ApiError> {
    if d.len() > 1024 || d.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "the description must be one line of at most 1024 bytes",
        ));
    }
    Ok(())
}

pub async fn profile_list(
    State(state): State<AppState>,
    _: Admin,
    Q(q): Q<ListQuery>,
) -> Result<Json<Vec<views::Profile>>, ApiError> {
    many(&state, move |c| catalog::list_profiles(c, q.archived)).await
}

pub async fn profile_show(
    State(state): State<AppState>,
    _: Admin,
    Path(name): Path<String>,
) -> Result<Json<views::Profile>, ApiError> {
    one(&state, move |c| catalog::get_profile(c, &name)).await
}

pub async fn profile_create(
    State(state): State<AppState>,
    _: Admin,
    Body(p): Body<params::ProfileCreate>,
) -> Result<Json<views::Profile>, ApiError> {
    check_name("profile", &p.name)?;
    if let Some(cwd) = &p.cwd {
        catalog::check_cwd(cwd).map_err(ApiError::bad_request)?;
    }
    one(&state, move |c| {
        catalog::create_profile(c, &p.name, p.cwd.as_deref())
    })
    .await
}

pub async fn profile_update(
    State(state): State<AppState>,
    _: Admin,
    Path(name): Path<String>,
    Body(p): Body<params::ProfileUpdate>,
) -> Result<Json<views::Profile>, ApiError> {
    if let Some(cwd) = &p.cwd {
        catalog::check_cwd(cwd).map_err(ApiError::bad_request)?;
    }
    one(&state, move |c| {
        catalog::update_profile(c, &name, p.cwd.as_deref())
    })
    .await
}

pub async fn profile_archive(
    State(state): State<AppState>,
    _: Admin,
    Path(name): Path<String>,
) -> Result<Json<views::Profile>, ApiError> {
    one(&state, move |c| catalog::archive_profile(c, &name)).await
}
