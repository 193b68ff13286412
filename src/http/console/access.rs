//! The console's Access page: who may do what under a policy version. The group × action
//! matrix (for each kind of agent and each action the policy names, the best a request gets
//! and when), an agent's effective permissions, and who may do an action (linked from every
//! audit event that names one), for every member who may read policies.

use askama::Template;
use axum::extract::State;
use serde::Deserialize;

use crate::context::SharedContext;
use crate::domain::access::Need;
use crate::http::operator::person_requires;
use crate::http::pages::render;
use crate::policy::access;
use crate::policy::semantic::access::AccessCell;

use super::extract::{NotLoggedIn, PageQuery, PageResult, Person};
use super::{shell, Section, Shell};

/// The matrix shows at most this many kinds of agent.
const MATRIX_ROWS: usize = 100;

/// The page's query: the policy and version, and what to look at (empty when not set).
#[derive(Debug, Default, Deserialize)]
pub struct AccessQuery {
    #[serde(default)]
    policy_id: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    agent: String,
    #[serde(default)]
    action: String,
}

#[derive(Template)]
#[template(path = "access.html", config = "src/http/templates/askama.toml")]
struct AccessPage {
    shell: Shell,
    query: AccessQuery,
    policy_id: String,
    version: i64,
    policy_hash: String,
    actions: Vec<String>,
    rows: Vec<MatrixRow>,
    rows_total: usize,
    agent: Option<AgentView>,
    action: Option<ActionView>,
    not_analysed: Vec<String>,
}

struct MatrixRow {
    groups: String,
    principals: String,
    cells: Vec<Best>,
}

/// A matrix cell: the best outcome (empty when a raw Cedar rule decides it) and when.
struct Best {
    outcome: String,
    condition: String,
}

struct CellRow {
    subject: String,
    condition: String,
    outcome: String,
    decided_by: String,
}

struct AgentView {
    id: String,
    groups: String,
    cells: Vec<CellRow>,
}

struct ActionView {
    name: String,
    cells: Vec<CellRow>,
}

fn row(subject: &str, c: &AccessCell) -> CellRow {
    CellRow {
        subject: subject.to_owned(),
        condition: c.condition.clone(),
        outcome: c.outcome.as_str().to_owned(),
        decided_by: c.decided_by.join(", "),
    }
}

fn given(text: &str) -> Option<&str> {
    Some(text.trim()).filter(|t| !t.is_empty())
}

/// Who may do what under a policy version.
#[utoipa::path(get, path = "/dashboard/access", tag = "dashboard",
    params(("policy_id" = Option<String>, Query), ("version" = Option<i64>, Query),
        ("agent" = Option<String>, Query, description = "an agent's id: its effective permissions"),
        ("action" = Option<String>, Query, description = "an action: who may do it")),
    responses((status = 200, description = "HTML page: the group × action matrix, an agent's permissions, an action's holders"), NotLoggedIn,
        (status = 403, description = "HTML page: the role may not read policies")))]
#[tracing::instrument(level = "debug", skip_all)]
pub async fn access_page(
    State(ctx): State<SharedContext>,
    PageQuery(query): PageQuery<AccessQuery>,
    Person(principal): Person,
) -> PageResult {
    person_requires(&principal, Need::PoliciesRead)?;
    let (workspace_id, _) = principal.membership()?;
    let policy = given(&query.policy_id);
    let version =
        match given(&query.version) {
            None => None,
            Some(v) => Some(v.parse::<i64>().map_err(|_| {
                crate::error::ApiError::invalid("version", "must be a version number")
            })?),
        };
    let matrix = access::matrix(&ctx, &workspace_id, policy, version, MATRIX_ROWS).await?;
    let mut not_analysed = matrix.found.not_analysed.clone();
    let agent = match given(&query.agent) {
        None => None,
        Some(id) => {
            let a = access::agent_access(&ctx, &workspace_id, id, policy, version).await?;
            not_analysed.extend(a.found.not_analysed.iter().cloned());
            Some(AgentView {
                id: id.to_owned(),
                groups: a.found.groups.join(", "),
                cells: a
                    .found
                    .actions
                    .iter()
                    .flat_map(|x| x.cells.iter().map(|c| row(&x.action, c)))
                    .collect(),
            })
        }
    };
    let action = match given(&query.action) {
        None => None,
        Some(name) => {
            let h = access::action_holders(&ctx, &workspace_id, name, policy, version).await?;
            not_analysed.extend(h.found.not_analysed.iter().cloned());
            Some(ActionView {
                name: h.found.action.clone(),
                cells: h
                    .found
                    .principals
                    .iter()
                    .flat_map(|p| {
                        let who = p.principals.join("; ");
                        p.cells.iter().map(move |c| row(&who, c))
                    })
                    .collect(),
            })
        }
    };
    not_analysed.sort();
    not_analysed.dedup();
    let shell = shell(&ctx, &principal, Section::Access).await?;
    let m = matrix.found;
    Ok(render(&AccessPage {
        shell,
        policy_id: matrix.policy_id,
        version: matrix.version,
        policy_hash: matrix.policy_hash,
        rows: m
            .rows
            .iter()
            .map(|r| MatrixRow {
                groups: r.groups.join("; "),
                principals: r.principals.join("; "),
                cells: r
                    .best
                    .iter()
                    .map(|b| match b {
                        Some(c) => Best {
                            outcome: c.outcome.as_str().to_owned(),
                            condition: c.condition.clone(),
                        },
                        None => Best {
                            outcome: String::new(),
                            condition: String::new(),
                        },
                    })
                    .collect(),
            })
            .collect(),
        rows_total: m.rows_total,
        actions: m.actions,
        agent,
        action,
        not_analysed,
        query,
    }))
}
