//! The attribute codec of the event log: `Writer` builds an event's stored attributes,
//! leaving out empty values; `Reader` reads them back, each once, so that an attribute
//! this build does not know is an error rather than ignored.

use std::collections::BTreeMap;
use std::str::FromStr;

use chrono::{DateTime, Utc};

use super::event::{Attributes, EventError};

/// Builds `Attributes`, leaving out empty values.
pub(super) struct Writer(pub(super) Attributes);

impl Writer {
    pub(super) fn text(mut self, name: &'static str, value: &str) -> Writer {
        if !value.is_empty() {
            self.0.insert(name, value.to_string());
        }
        self
    }

    pub(super) fn value(self, name: &'static str, value: impl ToString) -> Writer {
        let text = value.to_string();
        self.text(name, &text)
    }

    pub(super) fn maybe(self, name: &'static str, value: Option<impl ToString>) -> Writer {
        match value {
            Some(value) => self.value(name, value),
            None => self,
        }
    }
}

/// Reads attributes back, each once; what is left unread at the end is an error.
pub(super) struct Reader<'a> {
    /// The stored kind name, for errors.
    pub(super) kind: &'a str,
    /// The attributes not read yet.
    pub(super) attributes: BTreeMap<&'a str, &'a str>,
}

impl<'a> Reader<'a> {
    pub(super) fn error(&self, problem: String) -> EventError {
        EventError {
            kind: self.kind.to_string(),
            problem,
        }
    }

    /// A text attribute; absent reads as empty.
    pub(super) fn text(&mut self, name: &str) -> String {
        self.attributes
            .remove(name)
            .map(str::to_string)
            .unwrap_or_default()
    }

    pub(super) fn required(&mut self, name: &str) -> Result<String, EventError> {
        let value = self.text(name);
        if value.is_empty() {
            return Err(self.error(format!("attribute {name:?} is missing")));
        }
        Ok(value)
    }

    pub(super) fn maybe<T: FromStr>(&mut self, name: &str) -> Result<Option<T>, EventError> {
        let value = self.text(name);
        if value.is_empty() {
            return Ok(None);
        }
        value
            .parse()
            .map(Some)
            .map_err(|_| self.error(format!("attribute {name:?} cannot be read: {value:?}")))
    }

    pub(super) fn value<T: FromStr>(&mut self, name: &str) -> Result<T, EventError> {
        self.maybe(name)?
            .ok_or_else(|| self.error(format!("attribute {name:?} is missing")))
    }

    pub(super) fn time(&mut self, name: &str) -> Result<Option<DateTime<Utc>>, EventError> {
        Ok(self
            .maybe::<DateTime<chrono::FixedOffset>>(name)?
            .map(|t| t.with_timezone(&Utc)))
    }

    pub(super) fn finish<T>(self, value: T) -> Result<T, EventError> {
        match self.attributes.keys().next() {
            Some(name) => Err(self.error(format!("unknown attribute {name:?}"))),
            None => Ok(value),
        }
    }
}
