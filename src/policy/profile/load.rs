//! Loading profiles from a policy directory into a registry, over the presets.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::case::PolicyTest;
use super::compile::CompiledProfile;
use super::error::{LoadError, PolicyError};
use super::presets::presets;
use super::schema::{PermissionRule, PolicyProfile, ToolSpecifier};

/// The syntax of a profile file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileFormat {
    /// `.toml`
    Toml,
    /// `.yaml` / `.yml`, same schema.
    Yaml,
}

impl ProfileFormat {
    /// The format a file name implies; `None` for files a policy directory ignores.
    pub fn from_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()? {
            "toml" => Some(ProfileFormat::Toml),
            "yaml" | "yml" => Some(ProfileFormat::Yaml),
            _ => None,
        }
    }
}

/// Where a profile in a registry came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileSource {
    /// One of the built-in presets.
    Preset,
    /// A file of the policy directory.
    File(PathBuf),
}

struct Entry {
    profile: Arc<CompiledProfile>,
    source: ProfileSource,
}

/// The profiles a server knows, by name. Built at start and again by each reload (which
/// replaces the whole registry, see `LiveProfiles`); lookups by name are a hash probe and
/// an `Arc` clone.
pub struct ProfileRegistry {
    entries: HashMap<String, Entry>,
}

impl ProfileRegistry {
    /// The built-in presets only.
    pub fn builtin() -> Self {
        let entries = presets()
            .into_iter()
            // The presets are tested to compile; one that did not would be missing, not
            // a panic in the server.
            .filter_map(|p| CompiledProfile::compile(p).ok())
            .map(|c| {
                let entry = Entry {
                    profile: Arc::new(c),
                    source: ProfileSource::Preset,
                };
                (entry.profile.profile().name.clone(), entry)
            })
            .collect();
        Self { entries }
    }

    /// The presets, then every `.toml`/`.yaml`/`.yml` file of `policy_dir` (other files and
    /// names starting with `.` are ignored). A file's profile replaces a preset of the same
    /// name; two files with one name, or any bad file, fail the whole load. A file whose
    /// profile fails one of its own tests is bad.
    pub fn load(policy_dir: Option<&Path>) -> Result<Self, LoadError> {
        Self::load_files(policy_dir, true)
    }

    /// As [`ProfileRegistry::load`], without running the profiles' tests: for
    /// `policy test`, which runs them all and reports every failure rather than the first.
    pub fn load_untested(policy_dir: Option<&Path>) -> Result<Self, LoadError> {
        Self::load_files(policy_dir, false)
    }

    fn load_files(policy_dir: Option<&Path>, run_tests: bool) -> Result<Self, LoadError> {
        let mut registry = Self::builtin();
        let Some(dir) = policy_dir else {
            return Ok(registry);
        };
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| LoadError::Io { path, source }
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io(dir))? {
            let path = entry.map_err(io(dir))?.path();
            let hidden = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_none_or(|n| n.starts_with('.'));
            if !hidden && path.is_file() && ProfileFormat::from_path(&path).is_some() {
                files.push(path);
            }
        }
        files.sort();
        let mut from_files: HashMap<String, PathBuf> = HashMap::new();
        for path in files {
            let profile = load_file(&path)?;
            if let Some(first) = from_files.get(&profile.name) {
                return Err(LoadError::Duplicate {
                    path,
                    name: profile.name,
                    first: first.clone(),
                });
            }
            let compiled =
                CompiledProfile::compile(profile).map_err(|source| LoadError::Invalid {
                    path: path.clone(),
                    source,
                })?;
            if run_tests {
                compiled
                    .check_tests()
                    .map_err(|failure| LoadError::TestFailed {
                        path: path.clone(),
                        failure,
                    })?;
            }
            let name = compiled.profile().name.clone();
            from_files.insert(name.clone(), path.clone());
            registry.entries.insert(
                name,
                Entry {
                    profile: Arc::new(compiled),
                    source: ProfileSource::File(path),
                },
            );
        }
        Ok(registry)
    }

    /// The compiled profile of that name.
    pub fn get(&self, name: &str) -> Option<Arc<CompiledProfile>> {
        self.entries.get(name).map(|e| Arc::clone(&e.profile))
    }

    /// The loaded profile whose version has this hash.
    pub fn by_hash(&self, hash: &str) -> Option<Arc<CompiledProfile>> {
        self.entries
            .values()
            .find(|e| e.profile.hash() == hash)
            .map(|e| Arc::clone(&e.profile))
    }

    /// Where the profile of that name came from.
    pub fn source(&self, name: &str) -> Option<&ProfileSource> {
        self.entries.get(name).map(|e| &e.source)
    }

    /// All names, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.entries.keys().cloned().collect();
        names.sort();
        names
    }
}

fn load_file(path: &Path) -> Result<PolicyProfile, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let format = ProfileFormat::from_path(path).unwrap_or(ProfileFormat::Toml);
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    parse_profile(&text, format, stem).map_err(|e| match e {
        ParseError::Syntax(message) => LoadError::Syntax {
            path: path.to_path_buf(),
            message,
        },
        ParseError::Invalid(source) => LoadError::Invalid {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// Why the text of a profile is not a profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not valid TOML/YAML.
    #[error("{0}")]
    Syntax(String),
    /// Valid syntax, wrong profile.
    #[error(transparent)]
    Invalid(#[from] PolicyError),
}

/// Parses and validates one profile. `default_name` is used when the text names none
/// (a file's stem).
///
/// The text is read into a generic value first and then field by field, so that an
/// error names the exact field (`rules[3].decision`) rather than a line of the file.
pub fn parse_profile(
    text: &str,
    format: ProfileFormat,
    default_name: &str,
) -> Result<PolicyProfile, ParseError> {
    let value: Value = match format {
        ProfileFormat::Toml => {
            toml::from_str(text).map_err(|e| ParseError::Syntax(e.to_string()))?
        }
        ProfileFormat::Yaml => {
            serde_norway::from_str(text).map_err(|e| ParseError::Syntax(e.to_string()))?
        }
    };
    let profile = profile_from_value(value, default_name)?;
    profile.validate()?;
    Ok(profile)
}

const PROFILE_FIELDS: &[&str] = &[
    "name",
    "description",
    "mode",
    "rules",
    "quality_gate",
    "termination",
    "secrets",
    "protected",
    "writable",
    "trusted_tools",
    "network",
    "sandbox",
    "tests",
];
const RULE_FIELDS: &[&str] = &[
    "specifier",
    "decision",
    "path_allow",
    "path_deny",
    "command_allow",
    "command_deny",
    "domain_allow",
    "domain_deny",
    "input_match",
];
const SPECIFIER_FIELDS: &[&str] = &["tool", "sub_pattern"];
const TEST_FIELDS: &[&str] = &[
    "name",
    "tool",
    "command",
    "path",
    "url",
    "input",
    "workspace",
    "expect",
    "rule",
    "unmatched",
];

fn profile_from_value(value: Value, default_name: &str) -> Result<PolicyProfile, PolicyError> {
    let mut map = object(value, "")?;
    check_keys(&map, "", PROFILE_FIELDS)?;
    let mode = match take::<String>(&mut map, "", "mode")? {
        Some(m) => m
            .parse()
            .map_err(|e: super::schema::UnknownMode| PolicyError::new("mode", e.to_string()))?,
        None => Default::default(),
    };
    let rules = match map.remove("rules") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| rule_from_value(v, &format!("rules[{i}]")))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(PolicyError::new("rules", "expected an array of tables")),
    };
    let tests = match map.remove("tests") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| test_from_value(v, &format!("tests[{i}]")))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(PolicyError::new("tests", "expected an array of tables")),
    };
    Ok(PolicyProfile {
        name: take(&mut map, "", "name")?.unwrap_or_else(|| default_name.to_string()),
        description: take(&mut map, "", "description")?.unwrap_or_default(),
        mode,
        rules,
        quality_gate: section(&mut map, "quality_gate")?,
        termination: section(&mut map, "termination")?,
        secrets: take(&mut map, "", "secrets")?.unwrap_or_default(),
        protected: take(&mut map, "", "protected")?.unwrap_or_default(),
        writable: take(&mut map, "", "writable")?.unwrap_or_default(),
        trusted_tools: take(&mut map, "", "trusted_tools")?.unwrap_or_default(),
        network: take(&mut map, "", "network")?.unwrap_or_default(),
        sandbox: section(&mut map, "sandbox")?,
        tests,
    })
}

fn rule_from_value(value: Value, at: &str) -> Result<PermissionRule, PolicyError> {
    let mut map = object(value, at)?;
    check_keys(&map, at, RULE_FIELDS)?;
    let missing = |field: &str| PolicyError::new(format!("{at}.{field}"), "missing");
    let specifier_at = format!("{at}.specifier");
    let mut specifier = object(
        map.remove("specifier")
            .ok_or_else(|| missing("specifier"))?,
        &specifier_at,
    )?;
    check_keys(&specifier, &specifier_at, SPECIFIER_FIELDS)?;
    let decision: String = take(&mut map, at, "decision")?.ok_or_else(|| missing("decision"))?;
    let decision = decision
        .parse()
        .map_err(|e: crate::domain::UnknownDecision| {
            PolicyError::new(format!("{at}.decision"), e.to_string())
        })?;
    let mut list =
        |key: &str| take::<Vec<String>>(&mut map, at, key).map(Option::unwrap_or_default);
    Ok(PermissionRule {
        specifier: ToolSpecifier {
            tool: take(&mut specifier, &specifier_at, "tool")?
                .ok_or_else(|| missing("specifier.tool"))?,
            sub_pattern: take(&mut specifier, &specifier_at, "sub_pattern")?,
        },
        decision,
        path_allow: list("path_allow")?,
        path_deny: list("path_deny")?,
        command_allow: list("command_allow")?,
        command_deny: list("command_deny")?,
        domain_allow: list("domain_allow")?,
        domain_deny: list("domain_deny")?,
        input_match: take(&mut map, at, "input_match")?.unwrap_or_default(),
    })
}

fn test_from_value(value: Value, at: &str) -> Result<PolicyTest, PolicyError> {
    let mut map = object(value, at)?;
    check_keys(&map, at, TEST_FIELDS)?;
    let missing = |field: &str| PolicyError::new(format!("{at}.{field}"), "missing");
    let expect: String = take(&mut map, at, "expect")?.ok_or_else(|| missing("expect"))?;
    let expect = expect
        .parse()
        .map_err(|e: crate::domain::UnknownDecision| {
            PolicyError::new(format!("{at}.expect"), e.to_string())
        })?;
    let mut text = |key: &str| take::<String>(&mut map, at, key).map(Option::unwrap_or_default);
    let (command, path, url) = (text("command")?, text("path")?, text("url")?);
    Ok(PolicyTest {
        name: take(&mut map, at, "name")?,
        tool: take(&mut map, at, "tool")?.ok_or_else(|| missing("tool"))?,
        command,
        path,
        url,
        input: take(&mut map, at, "input")?,
        workspace: take(&mut map, at, "workspace")?,
        expect,
        rule: take(&mut map, at, "rule")?,
        unmatched: take(&mut map, at, "unmatched")?,
    })
}

fn field(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn object(value: Value, at: &str) -> Result<Map<String, Value>, PolicyError> {
    match value {
        Value::Object(map) => Ok(map),
        other => Err(PolicyError::new(
            if at.is_empty() { "profile" } else { at },
            format!("expected a table, found {}", kind(&other)),
        )),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "a table",
    }
}

fn check_keys(map: &Map<String, Value>, at: &str, allowed: &[&str]) -> Result<(), PolicyError> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(PolicyError::new(
            field(at, key),
            format!("unknown field (expected one of {})", allowed.join(", ")),
        )),
        None => Ok(()),
    }
}

/// Removes and converts one field; absent or null (an empty YAML key) is `None`.
fn take<T: DeserializeOwned>(
    map: &mut Map<String, Value>,
    at: &str,
    key: &str,
) -> Result<Option<T>, PolicyError> {
    match map.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| PolicyError::new(field(at, key), e.to_string())),
    }
}

/// A table of plain fields that all have defaults. Each field is tried on its own first,
/// so an error names it (`termination.max_steps: invalid type …`).
fn section<T: DeserializeOwned + Default>(
    map: &mut Map<String, Value>,
    key: &str,
) -> Result<T, PolicyError> {
    let table = match map.remove(key) {
        None | Some(Value::Null) => return Ok(T::default()),
        Some(v) => object(v, key)?,
    };
    for (k, v) in &table {
        // TOML's `nan`/`inf` arrive as null through the generic value, as does an empty
        // YAML key; neither is a usable limit.
        if v.is_null() {
            return Err(PolicyError::new(
                format!("{key}.{k}"),
                "has no value (numbers must be finite)",
            ));
        }
        let single = Value::Object(Map::from_iter([(k.clone(), v.clone())]));
        serde_json::from_value::<T>(single)
            .map_err(|e| PolicyError::new(format!("{key}.{k}"), e.to_string()))?;
    }
    serde_json::from_value(Value::Object(table)).map_err(|e| PolicyError::new(key, e.to_string()))
}
