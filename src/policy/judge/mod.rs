//! The judge: how one tool call is decided under a compiled profile.
//!
//! A shell command line is split into the parts bash would run, write or read (`shell`,
//! with the word scanner `lex`, the tree walker `walk` and the models of commands,
//! wrappers, programs, interpreters and runners); each part, and each file a call names,
//! is judged by the secrets, the protected places, the profile's network (`network`, by
//! the `catalogue` of what programs connect) and the profile's rules (`eval`,
//! `judgement`, `guard`),
//! with paths placed in the workspace (`path`, and `local` where the workspace is on this
//! machine). `offload` keeps long lines off the async runtime.

pub(crate) mod catalogue;
pub(crate) mod commands;
pub(crate) mod coproc;
pub(crate) mod eval;
pub(crate) mod expansion;
pub(crate) mod extent;
pub(crate) mod guard;
pub(crate) mod interpreters;
pub(crate) mod judgement;
pub(crate) mod lex;
pub(crate) mod local;
pub(crate) mod memo;
pub(crate) mod network;
pub(crate) mod offload;
pub(crate) mod options;
pub(crate) mod path;
pub(crate) mod programs;
pub(crate) mod protected;
pub(crate) mod reads;
pub(crate) mod secrets;
pub(crate) mod shell;
pub(crate) mod table;
pub(crate) mod walk;
pub(crate) mod words;
pub(crate) mod wrappers;
