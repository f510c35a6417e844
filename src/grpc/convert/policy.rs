//! Conversions for policy profiles and dry-run verdicts.

use super::{decision_from_proto, non_negative, non_negative_finite, required, ConvertError};
use crate::grpc::pb;
use crate::policy::{
    CompiledProfile, Network, PermissionRule, PolicyMode, PolicyProfile, ProfileChange,
    QualityGate, SandboxSettings, TerminationCondition, ToolSpecifier, Verdict,
};

impl From<PolicyMode> for pb::PolicyMode {
    fn from(mode: PolicyMode) -> pb::PolicyMode {
        match mode {
            PolicyMode::Default => pb::PolicyMode::Default,
            PolicyMode::AcceptEdits => pb::PolicyMode::AcceptEdits,
            PolicyMode::Plan => pb::PolicyMode::Plan,
            PolicyMode::Delegate => pb::PolicyMode::Delegate,
        }
    }
}

/// A wire policy mode; UNSPECIFIED is the default mode.
pub fn policy_mode_from_proto(field: &'static str, value: i32) -> Result<PolicyMode, ConvertError> {
    match pb::PolicyMode::try_from(value) {
        Ok(pb::PolicyMode::Unspecified | pb::PolicyMode::Default) => Ok(PolicyMode::Default),
        Ok(pb::PolicyMode::AcceptEdits) => Ok(PolicyMode::AcceptEdits),
        Ok(pb::PolicyMode::Plan) => Ok(PolicyMode::Plan),
        Ok(pb::PolicyMode::Delegate) => Ok(PolicyMode::Delegate),
        Err(_) => Err(ConvertError::InvalidEnum { field, value }),
    }
}

impl From<&TerminationCondition> for pb::TerminationCondition {
    fn from(t: &TerminationCondition) -> pb::TerminationCondition {
        pb::TerminationCondition {
            max_steps: t.max_steps,
            timeout_seconds: t.timeout_seconds,
            max_cost: t.max_cost,
            stall_detection: t.stall_detection,
            stall_threshold: t.stall_threshold,
            ask_timeout_seconds: t.ask_timeout_seconds,
        }
    }
}

impl TryFrom<pb::TerminationCondition> for TerminationCondition {
    type Error = ConvertError;

    fn try_from(t: pb::TerminationCondition) -> Result<TerminationCondition, ConvertError> {
        Ok(TerminationCondition {
            max_steps: non_negative("termination.max_steps", t.max_steps)?,
            timeout_seconds: non_negative("termination.timeout_seconds", t.timeout_seconds)?,
            max_cost: non_negative_finite("termination.max_cost", t.max_cost)?,
            stall_detection: t.stall_detection,
            stall_threshold: t.stall_threshold,
            ask_timeout_seconds: non_negative(
                "termination.ask_timeout_seconds",
                t.ask_timeout_seconds,
            )?,
        })
    }
}

impl From<&QualityGate> for pb::QualityGate {
    fn from(g: &QualityGate) -> pb::QualityGate {
        pb::QualityGate {
            require_tests_pass: g.require_tests_pass,
            require_lint_pass: g.require_lint_pass,
            rollback_on_gate_fail: g.rollback_on_gate_fail,
            test_command: g.test_command.clone(),
            lint_command: g.lint_command.clone(),
        }
    }
}

impl From<pb::QualityGate> for QualityGate {
    fn from(g: pb::QualityGate) -> QualityGate {
        QualityGate {
            require_tests_pass: g.require_tests_pass,
            require_lint_pass: g.require_lint_pass,
            rollback_on_gate_fail: g.rollback_on_gate_fail,
            test_command: g.test_command,
            lint_command: g.lint_command,
        }
    }
}

impl From<&PermissionRule> for pb::PermissionRule {
    fn from(rule: &PermissionRule) -> pb::PermissionRule {
        pb::PermissionRule {
            specifier: Some(pb::ToolSpecifier {
                tool: rule.specifier.tool.clone(),
                sub_pattern: rule.specifier.sub_pattern.clone().unwrap_or_default(),
            }),
            decision: pb::Decision::from(rule.decision).into(),
            path_allow: rule.path_allow.clone(),
            path_deny: rule.path_deny.clone(),
            command_allow: rule.command_allow.clone(),
            command_deny: rule.command_deny.clone(),
            domain_allow: rule.domain_allow.clone(),
            domain_deny: rule.domain_deny.clone(),
            input_match: rule
                .input_match
                .iter()
                .map(|(key, value)| (key.clone(), value.to_string()))
                .collect(),
        }
    }
}

/// Field names of rules carry no index here: the profile's own `validate` names the rule
/// index once the whole profile is converted.
impl TryFrom<pb::PermissionRule> for PermissionRule {
    type Error = ConvertError;

    fn try_from(rule: pb::PermissionRule) -> Result<PermissionRule, ConvertError> {
        let specifier = rule.specifier.ok_or(ConvertError::Required {
            field: "rules.specifier",
        })?;
        Ok(PermissionRule {
            specifier: ToolSpecifier {
                tool: required("rules.specifier.tool", specifier.tool)?,
                sub_pattern: (!specifier.sub_pattern.is_empty()).then_some(specifier.sub_pattern),
            },
            decision: decision_from_proto("rules.decision", rule.decision)?,
            path_allow: rule.path_allow,
            path_deny: rule.path_deny,
            command_allow: rule.command_allow,
            command_deny: rule.command_deny,
            domain_allow: rule.domain_allow,
            domain_deny: rule.domain_deny,
            input_match: rule
                .input_match
                .into_iter()
                .map(|(key, text)| {
                    serde_json::from_str(&text)
                        .map(|value| (key, value))
                        .map_err(|_| ConvertError::OutOfRange {
                            field: "rules.input_match",
                            problem: format!("{text:?} is not a JSON value"),
                        })
                })
                .collect::<Result<_, _>>()?,
        })
    }
}

impl From<&PolicyProfile> for pb::PolicyProfile {
    fn from(p: &PolicyProfile) -> pb::PolicyProfile {
        pb::PolicyProfile {
            name: p.name.clone(),
            description: p.description.clone(),
            mode: pb::PolicyMode::from(p.mode).into(),
            rules: p.rules.iter().map(pb::PermissionRule::from).collect(),
            quality_gate: Some(pb::QualityGate::from(&p.quality_gate)),
            termination: Some(pb::TerminationCondition::from(&p.termination)),
            // Only a compiled profile has a version (see below).
            hash: String::new(),
            secrets: p.secrets.clone(),
            protected: p.protected.clone(),
            writable: p.writable.clone(),
            trusted_tools: p.trusted_tools.clone(),
            sandbox: Some(pb::SandboxSettings {
                required: p.sandbox.required,
                egress: p.sandbox.egress.clone(),
            }),
            network: match &p.network {
                Network::Unstated => None,
                Network::Nothing => Some(pb::NetworkPolicy::default()),
                Network::Endpoints(endpoints) => Some(pb::NetworkPolicy {
                    endpoints: endpoints.clone(),
                }),
            },
        }
    }
}

/// A loaded profile, with its version.
impl From<&CompiledProfile> for pb::PolicyProfile {
    fn from(p: &CompiledProfile) -> pb::PolicyProfile {
        pb::PolicyProfile {
            hash: p.hash().to_string(),
            ..pb::PolicyProfile::from(p.profile())
        }
    }
}

impl From<ProfileChange> for pb::ProfileVersionChange {
    fn from(change: ProfileChange) -> pb::ProfileVersionChange {
        pb::ProfileVersionChange {
            name: change.name,
            previous_hash: change.previous.unwrap_or_default(),
            hash: change.current.unwrap_or_default(),
        }
    }
}

impl TryFrom<pb::PolicyProfile> for PolicyProfile {
    type Error = ConvertError;

    fn try_from(p: pb::PolicyProfile) -> Result<PolicyProfile, ConvertError> {
        Ok(PolicyProfile {
            name: required("name", p.name)?,
            description: p.description,
            mode: policy_mode_from_proto("mode", p.mode)?,
            rules: p
                .rules
                .into_iter()
                .map(PermissionRule::try_from)
                .collect::<Result<_, _>>()?,
            quality_gate: p.quality_gate.map(QualityGate::from).unwrap_or_default(),
            termination: p
                .termination
                .map(TerminationCondition::try_from)
                .transpose()?
                .unwrap_or_default(),
            secrets: p.secrets,
            protected: p.protected,
            writable: p.writable,
            trusted_tools: p.trusted_tools,
            sandbox: p
                .sandbox
                .map(|s| SandboxSettings {
                    required: s.required,
                    egress: s.egress,
                })
                .unwrap_or_default(),
            network: match p.network {
                None => Network::Unstated,
                Some(n) if n.endpoints.is_empty() => Network::Nothing,
                Some(n) => Network::Endpoints(n.endpoints),
            },
            // The API carries no tests: they are for the profile's author, checked when
            // its file loads.
            tests: Vec::new(),
        })
    }
}

impl From<Verdict> for pb::EvaluateResponse {
    fn from(v: Verdict) -> pb::EvaluateResponse {
        pb::EvaluateResponse {
            decision: pb::Decision::from(v.decision).into(),
            reason: v.reason,
            rule_index: v
                .rule_index
                .and_then(|i| i32::try_from(i).ok())
                .unwrap_or(-1),
            part: v.part.unwrap_or_default(),
        }
    }
}
