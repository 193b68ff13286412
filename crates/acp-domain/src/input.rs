//! A field of a request that is absent or malformed: the error every use case shares for its
//! typed input, answered as `missing_<field>` or `invalid_<field>`.

use std::borrow::Cow;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    /// Absent, null or empty.
    #[error("`{0}` is required")]
    Missing(Cow<'static, str>),
    /// Present with the wrong type, shape or value; `why` completes "`field` ...".
    #[error("`{field}` {why}")]
    Invalid {
        field: Cow<'static, str>,
        why: String,
    },
}

impl FieldError {
    pub fn missing(field: impl Into<Cow<'static, str>>) -> Self {
        Self::Missing(field.into())
    }

    pub fn invalid(field: impl Into<Cow<'static, str>>, why: impl std::fmt::Display) -> Self {
        Self::Invalid {
            field: field.into(),
            why: why.to_string(),
        }
    }

    /// The stable error code: `missing_<field>` or `invalid_<field>`.
    pub fn code(&self) -> String {
        match self {
            Self::Missing(field) => format!("missing_{field}"),
            Self::Invalid { field, .. } => format!("invalid_{field}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_messages_name_the_field() {
        let m = FieldError::missing("name");
        assert_eq!(
            (m.code(), m.to_string()),
            ("missing_name".into(), "`name` is required".into())
        );
        let i = FieldError::invalid("limit", "must be between 1 and 200");
        assert_eq!(i.code(), "invalid_limit");
        assert_eq!(i.to_string(), "`limit` must be between 1 and 200");
    }
}
