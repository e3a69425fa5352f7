//! `GET /admin/rlqs`: the RLQS bucket groups of this instance — each stream's demand and share, and
//! the fleet's assigned sum against the limit (docs/rlqs.md, "Observing it").

use axum::extract::State;
use axum::response::Response;
use http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

use super::json;
use super::responses::{AdminAccess, TAG_ADMIN};
use floodgate_app::App;
use floodgate_app::rlqs::GroupView;

/// The RLQS view.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = RlqsView)]
pub(super) struct View {
    /// Every bucket group with a stream on this instance, by domain, rule and key.
    groups: Vec<GroupView>,
}

/// RLQS bucket groups: streams, demand, shares, and the fleet's sum against each limit.
#[utoipa::path(
    get,
    path = "/admin/rlqs",
    tag = TAG_ADMIN,
    operation_id = "getRlqs",
    security((), ("adminToken" = [])),
    responses((status = 200, description = "This instance's RLQS groups, now.", body = View), AdminAccess),
)]
pub(super) async fn view(State(app): State<App>) -> Response {
    json(StatusCode::OK, &View { groups: app.rlqs().view() })
}
