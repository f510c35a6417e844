//! Claude Code's `permissions` settings (`allow`, `ask`, `deny`, `defaultMode`) and its
//! `sandbox` settings (`claude_sandbox`) as a runplane profile: `Read(…)` deny rules are
//! also the profile's `secrets`. docs/POLICY.md "Importing Claude Code rules" has the
//! mapping.

use serde_json::{Map, Value};

use super::claude_rule::{self, ClaudeRule, READ_TOOLS};
use super::claude_sandbox::import_sandbox;
use super::strings;
use super::{verify, ImportError, ImportNote, Imported, Probe, ProfileTest, TEST_WORKSPACE};
use crate::domain::Decision;
use crate::policy::profile::compile::CompiledProfile;
use crate::policy::profile::schema::{PermissionRule, PolicyMode, PolicyProfile};

/// What the profile is called and how `~/` reads on the machine that imports.
#[derive(Debug, Clone, Copy)]
pub struct ClaudeImport<'a> {
    /// The profile's name.
    pub name: &'a str,
    /// The profile's description.
    pub description: &'a str,
    /// The home directory `~/` stands for, if known: added to deny rules as an absolute
    /// path, since a worker may send either form.
    pub home: Option<&'a str>,
}

/// How Claude Code's `defaultMode` carries over.
struct ModeMapping {
    mode: PolicyMode,
    /// `dontAsk`: Claude Code asks nobody, so an ask rule denies.
    ask_as_deny: bool,
    /// `plan`: Claude Code only reads, so allow rules for other tools do nothing.
    only_read_allows: bool,
    /// `acceptEdits`: file edits are allowed after the settings' own rules.
    accept_edits: bool,
}

/// Imports the `permissions` of parsed Claude Code settings (a `settings.json`).
pub fn import_claude_code(
    settings: &Value,
    options: &ClaudeImport<'_>,
) -> Result<Imported, ImportError> {
    let Value::Object(settings) = settings else {
        return Err(malformed("settings", "expected a JSON object"));
    };
    let mut notes = Vec::new();
    let empty = Map::new();
    let permissions = match settings.get("permissions") {
        None | Some(Value::Null) => {
            notes.push(note(
                None,
                "no `permissions` in the settings: nothing to import",
            ));
            &empty
        }
        Some(Value::Object(p)) => p,
        Some(_) => return Err(malformed("permissions", "expected an object")),
    };
    for key in permissions.keys() {
        match key.as_str() {
            // It only limits which modes Claude Code itself may be switched to.
            "allow" | "ask" | "deny" | "defaultMode" | "disableBypassPermissionsMode" => {}
            "additionalDirectories" => notes.push(note(
                None,
                "permissions.additionalDirectories is not imported: runplane judges paths \
                 against the run's one workspace and never allows a path outside it",
            )),
            other => notes.push(note(None, &format!("permissions.{other} is not imported"))),
        }
    }
    let mapping = mode(permissions.get("defaultMode"), &mut notes)?;
    let sandbox = import_sandbox(settings, &mut notes)?;
    let mut secrets = sandbox.secrets;

    let mut rules: Vec<PermissionRule> = sandbox.write_deny.into_iter().collect();
    let mut probes: Vec<(String, Probe)> = Vec::new();
    // The rules as Claude Code reads them, with the decision each gives here: what the
    // generated tests expect.
    let mut oracle: Vec<(Decision, ClaudeRule)> = Vec::new();
    // Claude Code tries deny, then ask, then allow; runplane takes the first rule that
    // matches, so the lists are written in that order.
    for list in [Decision::Deny, Decision::Ask, Decision::Allow] {
        let decision = if list == Decision::Ask && mapping.ask_as_deny {
            Decision::Deny
        } else {
            list
        };
        for text in strings(permissions, "permissions", list.as_str(), &mut notes)? {
            let Some(parsed) = claude_rule::parse(&text) else {
                notes.push(note(
                    Some(&text),
                    "cannot be read as Tool or Tool(specifier); skipped",
                ));
                continue;
            };
            if decision == Decision::Allow
                && mapping.only_read_allows
                && !READ_TOOLS.contains(&parsed.tool.as_str())
            {
                notes.push(note(
                    Some(&text),
                    "dropped: in plan mode Claude Code neither edits nor runs commands",
                ));
                continue;
            }
            if list == Decision::Deny {
                secrets.extend(parsed.secret_globs().into_iter().flatten());
            }
            match parsed.translate(decision, options.home) {
                Ok(translated) => {
                    if let Some(approx) = &translated.note {
                        notes.push(note(Some(&text), approx));
                    }
                    if let Some(probe) = translated.probe {
                        probes.push((format!("{list} {text}"), probe));
                    }
                    rules.push(translated.rule);
                }
                Err(why) if decision == Decision::Allow => {
                    notes.push(note(Some(&text), &format!("dropped: {why}")));
                }
                Err(why) => {
                    // A wider ask would reach calls that plan mode denies: deny them.
                    let strict = if mapping.mode == PolicyMode::Plan {
                        Decision::Deny
                    } else {
                        decision
                    };
                    let rule = claude_rule::fallback(&parsed.text, &parsed.tool, strict);
                    notes.push(note(
                        Some(&text),
                        &format!("{why}; made stricter: {}", describe(&rule)),
                    ));
                    rules.push(rule);
                }
            }
            oracle.push((decision, parsed));
        }
    }
    if mapping.accept_edits {
        if let Some(edit) = claude_rule::parse("Edit") {
            if let Ok(translated) = edit.translate(Decision::Allow, options.home) {
                rules.push(translated.rule);
                let probe = Probe {
                    path: "a.txt".into(),
                    ..Probe::tool("Edit")
                };
                probes.push(("acceptEdits allows Edit".into(), probe));
            }
            oracle.push((Decision::Allow, edit));
        }
    }

    let profile = PolicyProfile {
        name: options.name.to_string(),
        description: options.description.to_string(),
        mode: mapping.mode,
        rules,
        secrets: dedup(secrets),
        protected: dedup(sandbox.protected),
        writable: dedup(sandbox.writable),
        network: sandbox.network,
        ..PolicyProfile::default()
    };
    let compiled = CompiledProfile::compile(profile.clone())?;
    let tests = probes
        .into_iter()
        .filter_map(|(name, probe)| {
            let expect = expected(&oracle, &probe)?;
            Some(ProfileTest {
                name,
                tool: probe.tool,
                command: probe.command,
                path: probe.path,
                url: probe.url,
                workspace: Some(TEST_WORKSPACE.to_string()),
                expect,
            })
        })
        .collect();
    let tests = verify(&compiled, tests, &mut notes)?;
    Ok(Imported {
        profile,
        tests,
        notes,
    })
}

/// The decision Claude Code gives `probe` under the settings: the first of deny, ask and
/// allow with a rule that matches it.
fn expected(oracle: &[(Decision, ClaudeRule)], probe: &Probe) -> Option<Decision> {
    [Decision::Deny, Decision::Ask, Decision::Allow]
        .into_iter()
        .find(|tier| {
            oracle
                .iter()
                .any(|(d, rule)| d == tier && rule.matches(probe) == Some(true))
        })
}

fn mode(value: Option<&Value>, notes: &mut Vec<ImportNote>) -> Result<ModeMapping, ImportError> {
    let name = match value {
        None | Some(Value::Null) => "default",
        Some(Value::String(name)) => name.as_str(),
        Some(_) => return Err(malformed("permissions.defaultMode", "expected a string")),
    };
    let base = ModeMapping {
        mode: PolicyMode::Default,
        ask_as_deny: false,
        only_read_allows: false,
        accept_edits: false,
    };
    let (mapping, message) = match name {
        "default" => (base, None),
        "acceptEdits" => (
            ModeMapping {
                accept_edits: true,
                ..base
            },
            Some(
                "defaultMode acceptEdits: mode default and, after the settings' rules, an allow \
                 for the file-editing tools (runplane's acceptEdits would allow every unmatched \
                 command too); the filesystem commands Claude Code also accepts (mkdir, touch, \
                 mv, cp) ask"
                    .to_string(),
            ),
        ),
        "plan" => (
            ModeMapping {
                mode: PolicyMode::Plan,
                only_read_allows: true,
                ..base
            },
            Some("defaultMode plan: mode plan, unmatched calls are denied".to_string()),
        ),
        "dontAsk" => (
            ModeMapping {
                mode: PolicyMode::Plan,
                ask_as_deny: true,
                ..base
            },
            Some(
                "defaultMode dontAsk: mode plan, unmatched calls are denied, and ask rules \
                 deny, as Claude Code asks nobody in this mode"
                    .to_string(),
            ),
        ),
        "bypassPermissions" => (
            base,
            Some(
                "defaultMode bypassPermissions is not imported: it would allow every call no \
                 rule matches; mode default (ask) instead"
                    .to_string(),
            ),
        ),
        other => (
            base,
            Some(format!(
                "defaultMode {other:?} has no runplane equivalent; mode default (ask) instead"
            )),
        ),
    };
    if let Some(message) = message {
        notes.push(note(None, &message));
    }
    if mapping.mode == PolicyMode::Default {
        notes.push(note(
            None,
            "Claude Code runs its read-only tools (Read, Grep, Glob) without asking; here \
             they ask unless a rule allows them",
        ));
    }
    Ok(mapping)
}

/// `items` in their first order, each once.
fn dedup(items: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    items
        .into_iter()
        .filter(|item| seen.insert(item.clone()))
        .collect()
}

fn describe(rule: &PermissionRule) -> String {
    let tool = &rule.specifier.tool;
    match rule.command_allow.first() {
        Some(word) => format!(
            "{} every {tool} command starting with {word:?}",
            rule.decision
        ),
        None => format!("{} every {tool} call", rule.decision),
    }
}

fn note(rule: Option<&str>, message: &str) -> ImportNote {
    ImportNote {
        rule: rule.map(str::to_string),
        message: message.to_string(),
    }
}

fn malformed(field: &str, message: &str) -> ImportError {
    ImportError::Malformed {
        field: field.to_string(),
        message: message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn import(settings: Value) -> Imported {
        let options = ClaudeImport {
            name: "imported",
            description: "",
            home: Some("/home/me"),
        };
        import_claude_code(&settings, &options).expect("imports")
    }

    #[test]
    fn deny_then_ask_then_allow() {
        let imported = import(serde_json::json!({"permissions": {
            "allow": ["Bash(git:*)"],
            "ask": ["Bash(git push:*)"],
            "deny": ["Bash(git push --force:*)"],
        }}));
        let decisions: Vec<Decision> = imported.profile.rules.iter().map(|r| r.decision).collect();
        assert_eq!(decisions, [Decision::Deny, Decision::Ask, Decision::Allow]);
        assert_eq!(imported.tests.len(), 3, "{:?}", imported.notes);
    }

    #[test]
    fn an_untranslatable_allow_is_dropped_and_a_deny_made_stricter() {
        let imported = import(serde_json::json!({"permissions": {
            "allow": ["Bash(echo \"hi\")", "Task(Explore)", "bash"],
            "deny": ["Bash(rm -rf \"$HOME\")", "Task(Plan)"],
        }}));
        let rules = &imported.profile.rules;
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].command_allow, vec!["rm".to_string()]);
        assert_eq!(rules[1].specifier.tool, "Task");
        assert!(rules[1].command_allow.is_empty());
        assert_eq!(
            imported.notes.iter().filter(|n| n.rule.is_some()).count(),
            5,
            "{:?}",
            imported.notes
        );
    }

    #[test]
    fn bad_shapes_are_errors_and_bad_entries_notes() {
        let options = ClaudeImport {
            name: "x",
            description: "",
            home: None,
        };
        for bad in [
            serde_json::json!([]),
            serde_json::json!({"permissions": []}),
            serde_json::json!({"permissions": {"allow": "Bash"}}),
            serde_json::json!({"permissions": {"defaultMode": 1}}),
        ] {
            assert!(matches!(
                import_claude_code(&bad, &options),
                Err(ImportError::Malformed { .. })
            ));
        }
        let imported = import(serde_json::json!({"permissions": {
            "allow": [1, "Bash(x", "Read", "no tool"],
            "deny": ["Bash(x"],
        }}));
        // The deny with a readable tool covers the whole tool; the allows are dropped.
        assert_eq!(imported.profile.rules.len(), 2);
        assert_eq!(imported.profile.rules[0].specifier.tool, "Bash");
        assert!(imported.profile.rules[0].command_allow.is_empty());
    }
}
