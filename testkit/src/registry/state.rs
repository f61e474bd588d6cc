//! The fake registry's state and request routing: pure, no I/O.

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// An answer: status and JSON body.
pub(super) struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    fn ok(body: Value) -> Reply {
        Reply { status: 200, body }
    }

    pub fn error(status: u16, code: i32, message: &str) -> Reply {
        Reply {
            status,
            body: json!({"error_code": code, "message": message}),
        }
    }
}

#[derive(Clone, PartialEq)]
struct Stored {
    schema: String,
    schema_type: String,
    references: Value,
}

#[derive(Default)]
pub(super) struct State {
    /// Index + 1 is the id.
    schemas: Vec<Stored>,
    /// Subject -> ids of versions 1, 2, ...
    subjects: BTreeMap<String, Vec<u32>>,
}

impl State {
    pub fn serve(&mut self, method: &str, path: &[&str], body: &[u8]) -> Reply {
        match (method, path) {
            ("GET", ["subjects"]) => Reply::ok(json!(self.subjects.keys().collect::<Vec<_>>())),
            ("GET", ["subjects", s, "versions"]) => match self.subjects.get(*s) {
                Some(ids) => Reply::ok(json!((1..=ids.len()).collect::<Vec<_>>())),
                None => subject_not_found(s),
            },
            ("GET", ["subjects", s, "versions", v]) => match self.version_of(s, v) {
                Ok((version, id)) => Reply::ok(self.registered(s, version, id)),
                Err(r) => r,
            },
            ("POST", ["subjects", s, "versions"]) => match parse_schema(body) {
                Ok(stored) => self.register(s, stored),
                Err(r) => r,
            },
            ("POST", ["subjects", s]) => match parse_schema(body) {
                Ok(stored) => self.lookup(s, &stored),
                Err(r) => r,
            },
            ("GET", ["schemas", "ids", id]) => {
                match id
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| self.schemas.get(i.wrapping_sub(1)))
                {
                    Some(stored) => Reply::ok(schema_json(stored, None)),
                    None => Reply::error(404, 40403, "Schema not found"),
                }
            }
            ("POST", ["compatibility", "subjects", s, "versions", v]) => {
                let stored = match parse_schema(body) {
                    Ok(stored) => stored,
                    Err(r) => return r,
                };
                match self.version_of(s, v) {
                    Ok((_, id)) => {
                        let existing = &self.schemas[id as usize - 1];
                        Reply::ok(json!({"is_compatible": compatible(existing, &stored)}))
                    }
                    Err(r) => r,
                }
            }
            _ => Reply::error(404, 404, "HTTP 404 Not Found"),
        }
    }

    fn version_of(&self, subject: &str, version: &str) -> Result<(usize, u32), Reply> {
        let ids = self
            .subjects
            .get(subject)
            .ok_or_else(|| subject_not_found(subject))?;
        let n = if version == "latest" {
            ids.len()
        } else {
            version
                .parse::<usize>()
                .map_err(|_| Reply::error(422, 42202, "Invalid version"))?
        };
        match n.checked_sub(1).and_then(|i| ids.get(i)) {
            Some(id) => Ok((n, *id)),
            None => Err(Reply::error(404, 40402, "Version not found.")),
        }
    }

    fn registered(&self, subject: &str, version: usize, id: u32) -> Value {
        let mut v = schema_json(&self.schemas[id as usize - 1], Some(id));
        v["subject"] = json!(subject);
        v["version"] = json!(version);
        v
    }

    fn register(&mut self, subject: &str, stored: Stored) -> Reply {
        if stored.schema_type == "AVRO" && apache_avro::Schema::parse_str(&stored.schema).is_err() {
            return Reply::error(422, 42201, "Invalid schema");
        }
        let versions = self.subjects.get(subject).cloned().unwrap_or_default();
        if let Some(id) = versions
            .iter()
            .find(|id| self.schemas[**id as usize - 1] == stored)
        {
            return Reply::ok(json!({"id": id}));
        }
        if let Some(latest) = versions.last() {
            if !compatible(&self.schemas[*latest as usize - 1], &stored) {
                return Reply::error(
                    409,
                    409,
                    "Schema being registered is incompatible with an earlier schema",
                );
            }
        }
        let id = match self.schemas.iter().position(|s| *s == stored) {
            Some(i) => i as u32 + 1,
            None => {
                self.schemas.push(stored);
                self.schemas.len() as u32
            }
        };
        self.subjects
            .entry(subject.to_owned())
            .or_default()
            .push(id);
        Reply::ok(json!({"id": id}))
    }

    fn lookup(&self, subject: &str, stored: &Stored) -> Reply {
        let Some(ids) = self.subjects.get(subject) else {
            return subject_not_found(subject);
        };
        match ids
            .iter()
            .enumerate()
            .find(|(_, id)| self.schemas[**id as usize - 1] == *stored)
        {
            Some((i, id)) => Reply::ok(self.registered(subject, i + 1, *id)),
            None => Reply::error(404, 40403, "Schema not found"),
        }
    }
}

fn subject_not_found(subject: &str) -> Reply {
    Reply::error(404, 40401, &format!("Subject '{subject}' not found."))
}

fn parse_schema(body: &[u8]) -> Result<Stored, Reply> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|_| Reply::error(422, 42201, "Invalid schema: body is not JSON"))?;
    let schema = v["schema"]
        .as_str()
        .ok_or_else(|| Reply::error(422, 42201, "Invalid schema: no `schema`"))?
        .to_owned();
    Ok(Stored {
        schema,
        schema_type: v["schemaType"].as_str().unwrap_or("AVRO").to_owned(),
        references: match &v["references"] {
            Value::Array(a) if !a.is_empty() => Value::Array(a.clone()),
            _ => Value::Null,
        },
    })
}

fn schema_json(stored: &Stored, id: Option<u32>) -> Value {
    let mut v = json!({"schema": stored.schema});
    if stored.schema_type != "AVRO" {
        v["schemaType"] = json!(stored.schema_type);
    }
    if !stored.references.is_null() {
        v["references"] = stored.references.clone();
    }
    if let Some(id) = id {
        v["id"] = json!(id);
    }
    v
}

/// BACKWARD: a reader with the new schema reads what the old one wrote.
fn compatible(old: &Stored, new: &Stored) -> bool {
    if old.schema_type != new.schema_type {
        return false;
    }
    if new.schema_type != "AVRO" {
        return true;
    }
    match (
        apache_avro::Schema::parse_str(&old.schema),
        apache_avro::Schema::parse_str(&new.schema),
    ) {
        (Ok(writer), Ok(reader)) => {
            apache_avro::schema_compatibility::SchemaCompatibility::can_read(&writer, &reader)
                .is_ok()
        }
        _ => false,
    }
}
