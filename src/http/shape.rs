//! Which field of a JSON body is wrong, and how, from serde's own error categories rather than
//! its message text: a body that failed to deserialize is read again into a tree that keeps
//! its members in the order written, and deserialized from that tree with an error type that
//! records which `serde::de::Error` constructor reported the failure (`missing_field`, an
//! `invalid_type` of `null`, or anything else).

use std::fmt;

use serde::de::value::{MapAccessDeserializer, MapDeserializer, SeqDeserializer};
use serde::de::{self, DeserializeOwned, IntoDeserializer, Unexpected, Visitor};
use serde::forward_to_deserialize_any;

/// A parsed JSON document; objects keep their members in document order, so the first wrong
/// field found is the first one written, as when the body is read directly.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl<'de> de::Deserialize<'de> for Node {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NodeVisitor;

        impl<'de> Visitor<'de> for NodeVisitor {
            type Value = Node;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }

            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Bool(v))
            }

            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::I64(v))
            }

            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::U64(v))
            }

            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                Ok(Node::F64(v))
            }

            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::Str(v.to_owned()))
            }

            fn visit_string<E>(self, v: String) -> Result<Node, E> {
                Ok(Node::Str(v))
            }

            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }

            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }

            fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
                de::Deserialize::deserialize(d)
            }

            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Node::Seq(items))
            }

            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut members = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Node>()? {
                    members.push((key, value));
                }
                Ok(Node::Map(members))
            }
        }

        deserializer.deserialize_any(NodeVisitor)
    }
}

/// How a deserialization failed, by the category serde reported it in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A required field is absent (`serde::de::Error::missing_field`).
    MissingField(&'static str),
    /// A value is `null` where the type takes none (`invalid_type` of a unit).
    Null,
    /// Any other wrong type, value, length or variant.
    Other,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingField(field) => write!(f, "missing field `{field}`"),
            Self::Null => f.write_str("null where a value is required"),
            Self::Other => f.write_str("wrong type or value"),
        }
    }
}

impl std::error::Error for Failure {}

impl de::Error for Failure {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Self::Other
    }

    fn missing_field(field: &'static str) -> Self {
        Self::MissingField(field)
    }

    fn invalid_type(unexpected: Unexpected<'_>, _: &dyn de::Expected) -> Self {
        if unexpected == Unexpected::Unit {
            Self::Null
        } else {
            Self::Other
        }
    }
}

/// Reads a [`Node`] as a serde data format whose errors are [`Failure`]s.
#[derive(Clone, Copy)]
struct NodeDeserializer<'a>(&'a Node);

impl<'de> IntoDeserializer<'de, Failure> for NodeDeserializer<'_> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'de> de::Deserializer<'de> for NodeDeserializer<'_> {
    type Error = Failure;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Failure> {
        match self.0 {
            Node::Null => visitor.visit_unit(),
            Node::Bool(v) => visitor.visit_bool(*v),
            Node::I64(v) => visitor.visit_i64(*v),
            Node::U64(v) => visitor.visit_u64(*v),
            Node::F64(v) => visitor.visit_f64(*v),
            Node::Str(v) => visitor.visit_str(v),
            Node::Seq(items) => {
                let mut seq = SeqDeserializer::new(items.iter().map(NodeDeserializer));
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Node::Map(members) => visitor.visit_map(MapDeserializer::new(
                members
                    .iter()
                    .map(|(k, v)| (k.as_str(), NodeDeserializer(v))),
            )),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Failure> {
        match self.0 {
            Node::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Failure> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Failure> {
        match self.0 {
            Node::Str(variant) => visitor.visit_enum(variant.as_str().into_deserializer()),
            Node::Map(members) if members.len() == 1 => {
                visitor.visit_enum(MapAccessDeserializer::new(MapDeserializer::new(
                    members
                        .iter()
                        .map(|(k, v)| (k.as_str(), NodeDeserializer(v))),
                )))
            }
            _ => self.deserialize_any(visitor),
        }
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

/// Where and how `node` fails to deserialize as `T`: the path of the failing value (as
/// `serde_path_to_error` names it) and the category; `None` when it deserializes after all.
pub fn failure_of<T: DeserializeOwned>(
    node: &Node,
) -> Option<(serde_path_to_error::Path, Failure)> {
    match serde_path_to_error::deserialize::<_, T>(NodeDeserializer(node)) {
        Ok(_) => None,
        Err(err) => {
            let path = err.path().clone();
            Some((path, err.into_inner()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(
        dead_code,
        reason = "deserialised only, to name the field a body gets wrong"
    )]
    struct Body {
        name: String,
        count: Option<u32>,
        inner: Option<Inner>,
        kind: Option<Kind>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(
        dead_code,
        reason = "deserialised only, to name the field a body gets wrong"
    )]
    struct Inner {
        label: String,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Plain,
    }

    fn failure(json: &str) -> Option<(String, Failure)> {
        let node: Node = serde_json::from_str(json).ok()?;
        failure_of::<Body>(&node).map(|(path, f)| (path.to_string(), f))
    }

    #[test]
    fn failures_are_found_in_document_order_and_sorted_by_category() {
        assert_eq!(
            failure(r#"{"name": "a", "count": 2, "kind": "plain"}"#),
            None
        );
        assert_eq!(
            failure(r#"{"count": 2}"#),
            Some((".".into(), Failure::MissingField("name")))
        );
        assert_eq!(
            failure(r#"{"name": null}"#),
            Some(("name".into(), Failure::Null))
        );
        assert_eq!(
            failure(r#"{"name": "a", "count": "two"}"#),
            Some(("count".into(), Failure::Other))
        );
        // The first wrong member as written, not as sorted.
        assert_eq!(
            failure(r#"{"name": 5, "count": "two"}"#),
            Some(("name".into(), Failure::Other))
        );
        assert_eq!(
            failure(r#"{"name": "a", "inner": {}}"#),
            Some(("inner".into(), Failure::MissingField("label")))
        );
        assert_eq!(
            failure(r#"{"name": "a", "kind": "fancy"}"#),
            Some(("kind".into(), Failure::Other))
        );
    }
}
