//! The kernel layers a sandboxed process puts on itself just before it becomes the agent
//! (inside bubblewrap's namespaces): Landlock and seccomp, with no new privileges. This is
//! the one place the plan turns into kernel rules.
//!
//! - Landlock (ABI 6 or later, required in full): writes only beneath the plan's writable
//!   places and the sandbox's private `/tmp` and `/dev`; TCP connect only to the egress
//!   proxy's port, no TCP bind; no signals to, and no abstract unix sockets of, processes
//!   outside the sandbox (ptrace out of the domain is refused by Landlock itself).
//! - seccomp: sockets only of the unix, or stream-over-IP families (no UDP, raw, packet or
//!   netlink sockets, so nothing reaches the network past the proxy, DNS included); no
//!   io_uring (its operations bypass the socket rule); no ptrace, namespaces, mounts, BPF,
//!   perf, keyrings or module loading.

use std::collections::BTreeMap;
use std::path::PathBuf;

use landlock::{
    AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

/// The Landlock ABI whose features the sandbox needs: TCP rules (4) and scopes (6).
pub const LANDLOCK_ABI: ABI = ABI::V6;

/// What the kernel layers are told.
#[derive(Debug, Clone)]
pub struct KernelRules {
    /// Places writes may go, besides `/dev` and the private `/tmp`.
    pub writable: Vec<PathBuf>,
    /// The TCP ports connects may go to (the egress proxy's).
    pub connect_ports: Vec<u16>,
}

/// Why a kernel layer could not be put in place: the agent must not start.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// Landlock is missing, too old, or refused a rule.
    #[error(
        "Landlock (ABI 6 or later, for TCP rules and signal scoping) cannot be enforced: \
         {0}. Use a kernel of Linux 6.12 or later with Landlock enabled (lsm=…,landlock), or \
         run without the sandbox (runplane work --sandbox off), which the run's log records"
    )]
    Landlock(String),
    /// seccomp could not be installed.
    #[error("seccomp cannot be enforced: {0}")]
    Seccomp(String),
}

/// Puts Landlock and seccomp on this process (and so on everything it starts).
pub fn restrict(rules: &KernelRules) -> Result<Vec<String>, KernelError> {
    let abi = landlock(rules)?;
    seccomp()?;
    Ok(vec![format!("landlock-abi-{abi}"), "seccomp".to_string()])
}

fn landlock(rules: &KernelRules) -> Result<i32, KernelError> {
    let fail = |e: &dyn std::fmt::Display| KernelError::Landlock(e.to_string());
    let writes = AccessFs::from_write(ABI::V3);
    let mut created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(writes)
        .map_err(|e| fail(&e))?
        .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
        .map_err(|e| fail(&e))?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(|e| fail(&e))?
        .create()
        .map_err(|e| fail(&e))?;
    let mut places = rules.writable.clone();
    places.extend(["/dev", "/tmp", "/var/tmp"].map(PathBuf::from));
    for place in places.iter().filter(|p| p.exists()) {
        let fd = PathFd::new(place).map_err(|e| fail(&e))?;
        created = created
            .add_rule(PathBeneath::new(fd, writes))
            .map_err(|e| fail(&e))?;
    }
    for port in &rules.connect_ports {
        created = created
            .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
            .map_err(|e| fail(&e))?;
    }
    let status = created.restrict_self().map_err(|e| fail(&e))?;
    if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
        return Err(KernelError::Landlock(format!(
            "the kernel enforced it only partly ({:?})",
            status.ruleset
        )));
    }
    Ok(LANDLOCK_ABI as i32)
}

/// The socket types other than a stream (`SOCK_TYPE_MASK` is the low four bits).
const NON_STREAM_TYPES: std::ops::RangeInclusive<u64> = 0..=15;
const SOCK_TYPE_MASK: u64 = 0xf;

fn seccomp() -> Result<(), KernelError> {
    let fail = |e: &dyn std::fmt::Display| KernelError::Seccomp(e.to_string());
    let cond = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| fail(&e))
    };
    let mut socket_rules = vec![SeccompRule::new(vec![
        cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?,
        cond(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
        cond(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
    ])
    .map_err(|e| fail(&e))?];
    for family in [libc::AF_INET, libc::AF_INET6] {
        for kind in NON_STREAM_TYPES.filter(|t| *t != libc::SOCK_STREAM as u64) {
            socket_rules.push(
                SeccompRule::new(vec![
                    cond(0, SeccompCmpOp::Eq, family as u64)?,
                    cond(1, SeccompCmpOp::MaskedEq(SOCK_TYPE_MASK), kind)?,
                ])
                .map_err(|e| fail(&e))?,
            );
        }
    }
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> = REFUSED_SYSCALLS
        .iter()
        .map(|call| (*call, Vec::new()))
        .collect();
    refused.insert(libc::SYS_socket, socket_rules);
    // A new user namespace through clone(2); clone3(2) passes its flags in memory that
    // seccomp cannot read, so it answers "not implemented" and libc falls back to clone.
    refused.insert(
        libc::SYS_clone,
        vec![SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(libc::CLONE_NEWUSER as u64),
            libc::CLONE_NEWUSER as u64,
        )
        .map_err(|e| fail(&e))?])
        .map_err(|e| fail(&e))?],
    );
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e: seccompiler::BackendError| fail(&e))?;
    let eperm = SeccompFilter::new(
        refused,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| fail(&e))?;
    let enosys = SeccompFilter::new(
        [(libc::SYS_clone3, Vec::new())].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| fail(&e))?;
    for filter in [eperm, enosys] {
        let program: BpfProgram = filter.try_into().map_err(|e| fail(&e))?;
        seccompiler::apply_filter(&program).map_err(|e| fail(&e))?;
    }
    Ok(())
}

/// System calls the agent never needs and a way out would: refused with EPERM.
const REFUSED_SYSCALLS: [i64; 24] = [
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_userfaultfd,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_kexec_load,
];

/// Whether this kernel can enforce the Landlock part (checked before an agent starts,
/// so a missing feature is named up front instead of in the agent's stderr).
pub fn landlock_supported() -> Result<(), KernelError> {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_write(ABI::V3))
        .and_then(|r| r.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp))
        .and_then(|r| r.scope(Scope::AbstractUnixSocket | Scope::Signal))
        .and_then(|r| r.create())
        .map(drop)
        .map_err(|e| KernelError::Landlock(e.to_string()))
}
