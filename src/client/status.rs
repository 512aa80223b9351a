//! The admin client's status and metrics-token calls.

use super::{Client, ClientError, seg};
use crate::api::status::*;

impl Client {
    pub async fn status(&self) -> Result<Status, ClientError> {
        self.get("api/v1/status").await
    }

    pub async fn scrape_token_create(&self, name: &str) -> Result<ScrapeTokenCreated, ClientError> {
        let body = ScrapeTokenCreate { name: name.into() };
        self.post("api/v1/metrics/tokens", &body).await
    }

    pub async fn scrape_token_list(&self) -> Result<Vec<ScrapeToken>, ClientError> {
        self.get("api/v1/metrics/tokens").await
    }

    pub async fn scrape_token_revoke(&self, id: &str) -> Result<ScrapeToken, ClientError> {
        let path = format!("api/v1/metrics/tokens/{}/revoke", seg(id));
        self.post(&path, &serde_json::json!({})).await
    }
}
