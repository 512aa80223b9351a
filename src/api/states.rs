//! The states of commands, computers, sessions and turns. Each is spelled once, here: the
//! database stores [`as_sql`](CommandState::as_sql), the wire carries the same word, and
//! [`parse`](CommandState::parse) reads it back.

/// An enum whose variants are stored and sent as fixed words.
macro_rules! word_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $word:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $word)] $variant,)+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The word stored in the database and sent on the wire.
            pub fn as_sql(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }

            pub fn parse(word: &str) -> Option<$name> {
                match word {
                    $($word => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_sql())
            }
        }
    };
}
pub(crate) use word_enum;

word_enum! {
    /// A Runner command: `pending -> leased -> running -> done | failed | cancelled`, plus
    /// `expired` (never started before its deadline) and `uncertain` (started, and its
    /// Runner's generation ended without an outcome).
    CommandState {
        Pending = "pending",
        Leased = "leased",
        Running = "running",
        Done = "done",
        Failed = "failed",
        Cancelled = "cancelled",
        Expired = "expired",
        Uncertain = "uncertain",
    }
}

impl CommandState {
    /// The states that never change again.
    pub const FINAL: [CommandState; 5] = [
        CommandState::Done,
        CommandState::Failed,
        CommandState::Cancelled,
        CommandState::Expired,
        CommandState::Uncertain,
    ];

    pub fn is_final(self) -> bool {
        Self::FINAL.contains(&self)
    }

    /// The final states as an SQL list, for `state IN (...)`.
    pub fn final_sql() -> &'static str {
        static LIST: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            let words: Vec<String> = CommandState::FINAL
                .iter()
                .map(|s| format!("'{}'", s.as_sql()))
                .collect();
            format!("({})", words.join(", "))
        });
        &LIST
    }
}

word_enum! {
    /// A computer record.
    ComputerState {
        Starting = "starting",
        Running = "running",
        Stopping = "stopping",
        Stopped = "stopped",
        Failed = "failed",
        Removed = "removed",
    }
}

impl ComputerState {
    /// A Runner command is in flight for it.
    pub fn is_busy(self) -> bool {
        matches!(self, ComputerState::Starting | ComputerState::Stopping)
    }
}

word_enum! {
    /// A Bot session.
    SessionState {
        Idle = "idle",
        Running = "running",
        /// Its stop could not be confirmed: never reused.
        PendingCleanup = "pending_cleanup",
        Closed = "closed",
    }
}

word_enum! {
    /// One turn of a session.
    TurnState {
        /// In an account's chat queue, not admitted yet (never stored in `turns`).
        Waiting = "waiting",
        Queued = "queued",
        Running = "running",
        Complete = "complete",
        Interrupted = "interrupted",
        Error = "error",
        Uncertain = "uncertain",
    }
}

impl TurnState {
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            TurnState::Waiting | TurnState::Queued | TurnState::Running
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        for s in CommandState::ALL {
            assert_eq!(CommandState::parse(s.as_sql()), Some(*s));
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::json!(s.as_sql())
            );
        }
        for s in ComputerState::ALL {
            assert_eq!(ComputerState::parse(s.as_sql()), Some(*s));
        }
        for s in SessionState::ALL {
            assert_eq!(SessionState::parse(s.as_sql()), Some(*s));
        }
        for s in TurnState::ALL {
            assert_eq!(TurnState::parse(s.as_sql()), Some(*s));
        }
        assert_eq!(CommandState::parse("finished"), None);
    }

    #[test]
    fn final_states_in_sql() {
        assert_eq!(
            CommandState::final_sql(),
            "('done', 'failed', 'cancelled', 'expired', 'uncertain')"
        );
        assert!(CommandState::Uncertain.is_final());
        assert!(!CommandState::Running.is_final());
    }
}
