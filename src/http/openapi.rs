//! The finishing pass over the OpenAPI document generated from the routes: the answers every
//! operation can give whatever its handler does (the extractors' and the middleware's), so that
//! each operation lists every status it can answer, and the constraints every text field shares.
//!
//! Each handler's annotation lists what its own logic answers; this pass adds, from facts of
//! the operation itself:
//! - every operation: 400 (a malformed header the server reads, a NUL in the path or query,
//!   a malformed query, a head that is not HTTP/1.1), 408 (the request timeout), 414 (an
//!   over-long URI), 431 (an over-large head) and 500;
//! - every operation that reads the database: 503 (the database is unreachable);
//! - every operation with a required security scheme: 401; every operation a person may call
//!   (session or personal access token): 403 (`not_a_member`, `csrf_failed`, ...); every
//!   operation an API key may call: 429 (the key's rate);
//! - every operation with a request body: 400, 413 and 415; a body whose schema has no required
//!   field is optional (an empty body reads as `{}`).
//!
//! Every text field and text parameter refuses NUL characters (`pattern`), objects take other
//! properties only as JSON without NUL characters (`JsonValue`), and operations that a
//! personal access token or a session may call list the token first (clients that hold both
//! send the token).

use serde_json::{json, Map, Value};

/// Operations that never touch the database (so never answer 503).
const WITHOUT_DATABASE: &[(&str, &str)] = &[
    ("get", "/healthz"),
    ("get", "/openapi.json"),
    ("get", "/login"),
    ("get", "/.well-known/openid-configuration"),
];

/// Visible ASCII, spaces and tabs: what a header value the server reads may hold.
pub const VISIBLE_ASCII: &str = "^[\\t\\x20-\\x7e]*$";

/// Text without NUL characters: every text value the server accepts.
pub const NO_NUL: &str = "^[^\\x00]*$";

/// The shared answers, as `#/components/responses/<name>`: (status, name, description).
const SHARED: &[(&str, &str, &str)] = &[
    (
        "400",
        "BadRequest",
        "Bad input: `invalid_json` (not a JSON object, malformed, or text with NUL characters), \
         `missing_<field>`, `invalid_<field>`, `invalid_query`, `invalid_path`, \
         `invalid_header` (a header the server reads is not visible ASCII), or \
         `malformed_request` (a request line or header line that is not HTTP/1.1)",
    ),
    (
        "401",
        "Unauthorized",
        "No valid credential: `missing_api_key`, `invalid_api_key`, `unauthenticated`, \
         `invalid_token`, `session_required`, or a signature error",
    ),
    (
        "403",
        "Forbidden",
        "A person's request the server refuses: `not_a_member` (not a member of the workspace), \
         `insufficient_role`, `csrf_failed` (a session's state-changing request without its \
         `X-CSRF-Token`), `session_required` (a personal access token where only a session will do)",
    ),
    (
        "408",
        "RequestTimeout",
        "`request_timeout`: the request took longer than 30 seconds",
    ),
    (
        "413",
        "PayloadTooLarge",
        "`payload_too_large`: the body is over 1 MiB",
    ),
    (
        "414",
        "UriTooLong",
        "`uri_too_long`: the path and query are over 8 KiB",
    ),
    (
        "431",
        "HeadersTooLarge",
        "`headers_too_large`: the request's head is over the HTTP layer's buffer (about 400 KiB)",
    ),
    (
        "415",
        "UnsupportedMediaType",
        "`unsupported_media_type`: the body is not `application/json`",
    ),
    (
        "429",
        "TooManyRequests",
        "`rate_limited`: the API key's rate on this replica is spent (each request spends one \
         token, a batch one per decision); `retry_after` (seconds) and `Retry-After` say when to \
         retry",
    ),
    (
        "500",
        "InternalError",
        "`internal_error`: a failure the caller cannot fix (logged with the request id)",
    ),
    (
        "503",
        "Unavailable",
        "`service_unavailable`: the database is unreachable or the server is stopping; retry",
    ),
];

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    })
}

/// Applies the pass to a document serialized as JSON.
pub fn finish(doc: &mut Value) {
    let Some(root) = doc.as_object_mut() else {
        return;
    };
    let components = root
        .entry("components")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    if let Some(components) = components {
        let responses = components
            .entry("responses")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(responses) = responses {
            for (_, name, description) in SHARED {
                responses.insert((*name).to_owned(), error_response(description));
            }
        }
        if let Some(schemas) = components.get_mut("schemas").and_then(Value::as_object_mut) {
            for schema in schemas.values_mut() {
                forbid_nul(schema);
                free_form_is_json(schema);
            }
            schemas.insert("JsonValue".into(), json_value());
        }
    }
    let schemas = root
        .get("components")
        .and_then(|c| c.get("schemas"))
        .cloned()
        .unwrap_or(Value::Null);
    let Some(paths) = root.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, op) in item.iter_mut() {
            if let Some(op) = op.as_object_mut() {
                finish_operation(method, path, op, &schemas);
            }
        }
    }
}

fn finish_operation(method: &str, path: &str, op: &mut Map<String, Value>, schemas: &Value) {
    let mut add = vec!["400", "408", "414", "431", "500"];
    if !WITHOUT_DATABASE.contains(&(method, path)) {
        add.push("503");
    }
    if let Some(security) = op.get_mut("security").and_then(Value::as_array_mut) {
        let optional = security
            .iter()
            .any(|r| r.as_object().is_some_and(Map::is_empty));
        if !optional && !security.is_empty() {
            add.push("401");
        }
        if security.iter().any(|r| r.get("api_key").is_some()) {
            add.push("429");
        }
        // The token (a header) before the session (a cookie).
        security.sort_by_key(|r| r.get("session").is_some());
        let person = security
            .iter()
            .any(|r| r.get("session").is_some() || r.get("access_token").is_some());
        if person {
            add.push("403");
        }
    }
    if let Some(body) = op.get_mut("requestBody").and_then(Value::as_object_mut) {
        add.extend(["413", "415"]);
        let schema = body
            .get("content")
            .and_then(|c| c.get("application/json"))
            .and_then(|c| c.get("schema"));
        let has_required = schema
            .map(|s| resolve(s, schemas))
            .and_then(|s| s.get("required"))
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty());
        body.insert("required".into(), Value::Bool(has_required));
    }
    if let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) {
        for param in params {
            let header = param.get("in").and_then(Value::as_str) == Some("header");
            if let Some(schema) = param.get_mut("schema") {
                // A header the server reads must be visible ASCII (else 400 `invalid_header`).
                if header && schema.get("type").and_then(Value::as_str) == Some("string") {
                    if let Some(map) = schema.as_object_mut() {
                        map.entry("pattern")
                            .or_insert_with(|| Value::String(VISIBLE_ASCII.into()));
                    }
                }
                forbid_nul(schema);
            }
        }
    }
    let responses = op
        .entry("responses")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    if let Some(responses) = responses {
        for status in add {
            if responses.contains_key(status) {
                continue;
            }
            if let Some((_, name, _)) = SHARED.iter().find(|(s, _, _)| *s == status) {
                responses.insert(
                    status.to_owned(),
                    json!({"$ref": format!("#/components/responses/{name}")}),
                );
            }
        }
        let mut sorted: Vec<(String, Value)> = std::mem::take(responses).into_iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        responses.extend(sorted);
    }
}

/// The schema a `$ref` to `#/components/schemas/...` names, else the schema itself.
fn resolve<'a>(schema: &'a Value, schemas: &'a Value) -> &'a Value {
    match schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
    {
        Some(name) => schemas.get(name).unwrap_or(schema),
        None => schema,
    }
}

/// Any JSON value whose text (strings and object keys, at any depth) holds no NUL character:
/// what the server accepts where a field is free-form.
fn json_value() -> Value {
    json!({
        "description": "Any JSON value without NUL characters in its strings and keys",
        "anyOf": [
            {"type": ["null", "boolean", "number"]},
            {"type": "string", "pattern": NO_NUL},
            {"type": "array", "items": {"$ref": "#/components/schemas/JsonValue"}},
            {
                "type": "object",
                "propertyNames": {"pattern": NO_NUL},
                "additionalProperties": {"$ref": "#/components/schemas/JsonValue"}
            }
        ]
    })
}

/// Objects: properties they do not name (which the server ignores) and free-form values are
/// JSON without NUL characters, which is all the server accepts (it refuses NUL anywhere in a
/// body).
fn free_form_is_json(schema: &mut Value) {
    let Some(map) = schema.as_object_mut() else {
        return;
    };
    let is_object = match map.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
        _ => false,
    };
    if is_object && !map.contains_key("additionalProperties") {
        map.insert("propertyNames".into(), json!({"pattern": NO_NUL}));
        map.insert(
            "additionalProperties".into(),
            json!({"$ref": "#/components/schemas/JsonValue"}),
        );
    }
    if let Some(props) = map.get_mut("properties").and_then(Value::as_object_mut) {
        for prop in props.values_mut() {
            let free = prop.as_object().is_some_and(|p| {
                !["type", "$ref", "allOf", "anyOf", "oneOf"]
                    .iter()
                    .any(|k| p.contains_key(*k))
            });
            if free {
                if let Some(p) = prop.as_object_mut() {
                    p.insert("$ref".into(), json!("#/components/schemas/JsonValue"));
                }
            } else {
                free_form_is_json(prop);
            }
        }
    }
    if let Some(items) = map.get_mut("items") {
        let free = items.as_object().is_some_and(Map::is_empty);
        if free {
            *items = json!({"$ref": "#/components/schemas/JsonValue"});
        } else {
            free_form_is_json(items);
        }
    }
}

/// Adds the no-NUL pattern to every text schema under `schema` that has no pattern of its own.
fn forbid_nul(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let is_text = match map.get("type") {
                Some(Value::String(t)) => t == "string",
                Some(Value::Array(types)) => types.iter().any(|t| t == "string"),
                _ => false,
            };
            let free = map.get("format").is_none() && !map.contains_key("enum");
            if is_text && free && !map.contains_key("pattern") {
                map.insert("pattern".into(), Value::String(NO_NUL.into()));
            }
            for (key, value) in map.iter_mut() {
                // Examples are data, not schemas.
                if key != "example" && key != "examples" && key != "default" {
                    forbid_nul(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(forbid_nul),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pass_adds_the_shared_answers_and_the_text_pattern() {
        let mut doc = json!({
            "paths": {
                "/x/{id}": {"post": {
                    "parameters": [{"name": "id", "in": "path", "schema": {"type": "string"}}],
                    "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/B"}}}, "required": true},
                    "responses": {"200": {"description": ""}, "400": {"description": "own"}},
                    "security": [{"session": []}, {"access_token": []}]
                }},
                "/healthz": {"get": {"responses": {"200": {"description": ""}}}}
            },
            "components": {"schemas": {"B": {"type": "object", "properties": {
                "reason": {"type": ["string", "null"]}, "n": {"type": "integer"}
            }}}}
        });
        finish(&mut doc);
        let op = &doc["paths"]["/x/{id}"]["post"];
        let statuses: Vec<&String> = op["responses"].as_object().unwrap().keys().collect();
        assert_eq!(
            statuses,
            ["200", "400", "401", "403", "408", "413", "414", "415", "431", "500", "503"]
        );
        assert_eq!(op["responses"]["400"]["description"], "own");
        assert_eq!(op["requestBody"]["required"], false, "no required field");
        assert_eq!(op["security"][0], json!({"access_token": []}));
        assert_eq!(op["parameters"][0]["schema"]["pattern"], NO_NUL);
        let body = &doc["components"]["schemas"]["B"]["properties"];
        assert_eq!(body["reason"]["pattern"], NO_NUL);
        assert!(body["n"].get("pattern").is_none());
        let health = doc["paths"]["/healthz"]["get"]["responses"]
            .as_object()
            .unwrap();
        assert!(!health.contains_key("503") && !health.contains_key("401"));
        assert!(doc["components"]["responses"]["UriTooLong"].is_object());
        let b = &doc["components"]["schemas"]["B"];
        assert_eq!(
            b["additionalProperties"]["$ref"],
            "#/components/schemas/JsonValue"
        );
        assert_eq!(b["propertyNames"]["pattern"], NO_NUL);
        assert!(doc["components"]["schemas"]["JsonValue"]["anyOf"].is_array());
    }
}
