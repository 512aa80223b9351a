//! Ids of the control plane's objects, one type each, so a command id cannot go where a
//! session id is wanted. On the wire and in the database they are the plain string or
//! number they wrap (`#[serde(transparent)]`; the store maps them to TEXT and INTEGER).
//! A string id reads as a `str` (`Deref`); making one from a string is explicit.

use serde::{Deserialize, Serialize};

/// A string id type.
macro_rules! string_id {
    ($($(#[$meta:meta])* $name:ident;)+) => {$(
        $(#[$meta])*
        #[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        /// As the string: `{id:?}` in a message reads `"ab12"`.
        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&self.0, f)
            }
        }

        impl $name {
            pub fn new(id: impl Into<String>) -> Self {
                $name(id.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                $name(id)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                $name(id.to_string())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<&$name> for $name {
            fn eq(&self, other: &&$name) -> bool {
                self == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }
    )+};
}

/// A counter id type: it only grows.
macro_rules! counter {
    ($($(#[$meta:meta])* $name:ident;)+) => {$(
        $(#[$meta])*
        #[derive(
            Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub i64);

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        impl $name {
            pub fn get(self) -> i64 {
                self.0
            }

            /// The one after this one.
            pub fn next(self) -> Self {
                $name(self.0 + 1)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        impl From<i64> for $name {
            fn from(n: i64) -> Self {
                $name(n)
            }
        }
    )+};
}

string_id! {
    /// A registered Runner.
    RunnerId;
    /// A command in a Runner's queue.
    CommandId;
    /// A Bot session (yy's id, not Hermes's).
    SessionId;
    /// A computer record.
    ComputerId;
}

counter! {
    /// A Runner's connection generation: each connect takes the next one, and requests
    /// of an older one are refused.
    Generation;
    /// A computer's execution fence: every start, stop and new Runner connection raises
    /// it, and the Runner refuses an operation under a smaller one. Also the fence of an
    /// operator's control of a computer.
    Fence;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_their_plain_values_on_the_wire() {
        let id = SessionId::new("ab12");
        assert_eq!(
            serde_json::to_value(&id).unwrap(),
            serde_json::json!("ab12")
        );
        let back: SessionId = serde_json::from_value(serde_json::json!("ab12")).unwrap();
        assert_eq!(back, id);
        assert_eq!(back, "ab12");
        assert_eq!(id.to_string(), "ab12");
        assert_eq!(format!("{id:?}"), "\"ab12\"");
        let g = Generation(7);
        assert_eq!(serde_json::to_value(g).unwrap(), serde_json::json!(7));
        let f: Fence = serde_json::from_value(serde_json::json!(3)).unwrap();
        assert_eq!(f.next(), Fence(4));
        assert!(Fence(3) < Fence(4));
    }
}
