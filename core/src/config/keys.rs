//! The keys the configuration compiler accepts, table by table, read from its serde model.
//!
//! The configuration reference (`docs/src/configuration-reference.md`) is checked against
//! [`accepted_keys`], so that it cannot name a key the compiler refuses nor leave out one it
//! takes. The keys are not listed by hand: serde's derived `Deserialize` of each table of
//! `schema` calls `deserialize_struct` with every key it accepts, and [`accepted_keys`] asks
//! for them with a deserializer of its own ([`Tracer`]) that holds no data, only a route of
//! keys. Along the route it offers one key per table; at the route's end it records the keys
//! serde lists and stops. From the empty route (the file's own keys), each key found is tried
//! as a route one longer: a key whose value is a table yields that table's keys, a key whose
//! value is anything else (a string, a number, a size, a duration) ends its branch. Options
//! are entered (`Some`), and an array gives one element, so the tables of an array share its
//! path (`vm.passthrough` for every `[[vm.passthrough]]`). A last pass per table offers a key
//! no table has, to tell whether the table refuses unknown keys (`deny_unknown_fields`) or
//! would ignore them.

use std::collections::VecDeque;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor};

use super::schema::ConfigFile;

/// One table of the configuration file and the keys it accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTable {
    /// Its dotted path from the top of the file: `""` for the file itself, `system`, `vm`,
    /// `system.ram`, `vm.passthrough` (the tables of an array share the array's path).
    pub path: String,
    /// Every key it accepts, in the order the model declares them.
    pub keys: Vec<&'static str>,
    /// Whether any other key is refused with an error (rather than ignored).
    pub refuses_unknown: bool,
}

/// Every table of the configuration file with the keys it accepts, the file itself first,
/// then breadth first in the order the model declares them.
pub fn accepted_keys() -> Vec<KeyTable> {
    let mut tables = Vec::new();
    let mut routes: VecDeque<Vec<&'static str>> = VecDeque::from([Vec::new()]);
    while let Some(route) = routes.pop_front() {
        let Stop::Table(keys) = trace(&route, false) else {
            continue;
        };
        let refuses_unknown = matches!(trace(&route, true), Stop::UnknownRefused);
        if route.len() < MAX_DEPTH {
            for key in keys {
                let mut longer = route.clone();
                longer.push(key);
                routes.push_back(longer);
            }
        }
        tables.push(KeyTable {
            path: route.join("."),
            keys: keys.to_vec(),
            refuses_unknown,
        });
    }
    tables
}

/// Deepest route tried: far below anything the model nests, it only bounds the walk should a
/// table ever contain itself.
const MAX_DEPTH: usize = 8;

/// The key offered to learn whether a table refuses unknown keys: no table has it.
const PROBE_KEY: &str = "keel-reference-probe: no table has this key";

/// Deserializes the model along `route` and says where it stopped: the keys of the table at
/// the route's end, or (with `probe`) whether that table refused an unknown key.
fn trace(route: &[&'static str], probe: bool) -> Stop {
    match ConfigFile::deserialize(Tracer { route, probe }) {
        // The tracer gives no value to build a table from, so a whole file is never built.
        Ok(_) => Stop::Other("a whole file was built from the tracer".into()),
        Err(stop) => stop,
    }
}

/// Why tracing stopped: it always does, the tracer having no data to give.
#[derive(Debug)]
enum Stop {
    /// The route ends at a table with these keys.
    Table(&'static [&'static str]),
    /// The route ends at a value that is not a table.
    Value,
    /// The table at the route's end refused the probe key.
    UnknownRefused,
    /// Anything else serde reported (a missing key, for instance).
    Other(String),
}

impl fmt::Display for Stop {
    fn fmt(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Stop::Table(keys) => write!(formatter, "a table of keys {}", keys.join(", ")),
            Stop::Value => formatter.write_str("a value that is not a table"),
            Stop::UnknownRefused => formatter.write_str("an unknown key refused"),
            Stop::Other(message) => formatter.write_str(message),
        }
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Stop::Other(message.to_string())
    }

    fn unknown_field(field: &str, _expected: &'static [&'static str]) -> Self {
        if field == PROBE_KEY {
            Stop::UnknownRefused
        } else {
            Stop::Other(format!("unknown key `{field}`"))
        }
    }
}

/// A deserializer with no data: it follows `route` through the model's tables (see the
/// module's comment).
#[derive(Clone, Copy)]
struct Tracer<'r> {
    /// The keys still to follow, one per table.
    route: &'r [&'static str],
    /// At the route's end, offer [`PROBE_KEY`] instead of stopping with the table's keys.
    probe: bool,
}

impl<'de> Deserializer<'de> for Tracer<'_> {
    type Error = Stop;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Stop> {
        match self.route.split_first() {
            Some((key, rest)) => visitor.visit_map(OneKey {
                key: Some(key),
                value: Tracer {
                    route: rest,
                    probe: self.probe,
                },
            }),
            None if self.probe => visitor.visit_map(OneKey {
                key: Some(PROBE_KEY),
                value: self,
            }),
            None => Err(Stop::Table(fields)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_some(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_seq(OneElement(Some(self)))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Stop> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_unit()
    }

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Stop> {
        Err(Stop::Value)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct tuple tuple_struct map enum identifier
    }
}

/// A table with one key, whose value the tracer follows.
struct OneKey<'r> {
    key: Option<&'static str>,
    value: Tracer<'r>,
}

impl<'de> MapAccess<'de> for OneKey<'_> {
    type Error = Stop;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Stop> {
        match self.key.take() {
            Some(key) => seed.deserialize(key.into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Stop> {
        seed.deserialize(self.value)
    }
}

/// An array with one element, which the tracer follows.
struct OneElement<'r>(Option<Tracer<'r>>);

impl<'de> SeqAccess<'de> for OneElement<'_> {
    type Error = Stop;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Stop> {
        match self.0.take() {
            Some(tracer) => seed.deserialize(tracer).map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table<'a>(tables: &'a [KeyTable], path: &str) -> Option<&'a KeyTable> {
        tables.iter().find(|table| table.path == path)
    }

    #[test]
    fn the_file_and_its_tables_are_found_with_their_keys() {
        let tables = accepted_keys();
        assert_eq!(tables[0].path, "");
        assert_eq!(tables[0].keys, ["system", "vm", "pcpu", "channel"]);
        assert_eq!(
            table(&tables, "vm.passthrough").map(|t| t.keys.clone()),
            Some(vec!["path", "ipa", "clocks", "unisolated_dma"])
        );
        // A table inside an option inside an array of tables.
        assert_eq!(
            table(&tables, "vm.schedule").map(|t| t.keys.clone()),
            Some(vec!["priority", "period", "budget", "deadline"])
        );
        // The same table type under several keys is found under each.
        for path in ["system.ram", "system.hypervisor", "vm.memory", "vm.flash"] {
            assert_eq!(
                table(&tables, path).map(|t| t.keys.clone()),
                Some(vec!["base", "size"]),
                "{path}"
            );
        }
    }

    #[test]
    fn values_that_are_not_tables_have_no_keys() {
        let tables = accepted_keys();
        // A string, a size (read with deserialize_any), a duration, an array of strings.
        for path in [
            "system.name",
            "system.ram.size",
            "pcpu.quantum",
            "vm.devices",
        ] {
            assert!(table(&tables, path).is_none(), "{path} taken for a table");
        }
    }

    #[test]
    fn every_table_of_the_model_refuses_unknown_keys() {
        for table in accepted_keys() {
            assert!(
                table.refuses_unknown,
                "`{}` ignores unknown keys",
                table.path
            );
        }
    }

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Lenient {
        known: Option<u32>,
    }

    #[test]
    fn a_table_without_deny_unknown_fields_is_told_apart() {
        assert!(matches!(
            Lenient::deserialize(Tracer {
                route: &[],
                probe: true
            }),
            Ok(_) | Err(Stop::Other(_))
        ));
        assert!(matches!(
            Lenient::deserialize(Tracer {
                route: &[],
                probe: false
            }),
            Err(Stop::Table(["known"]))
        ));
    }
}
