//! A policy profile from file to use: what an operator writes (`schema`, with its
//! containment settings and tests), how a policy directory is loaded, checked and linted
//! (`load`, `check`, `lint`), compiled for the judge (`compile`), versioned and rendered
//! back (`version`, `render`), reloaded while the server runs (`live`), the presets, the
//! run's grants over a profile's asks (`grants`), and imports from other agents' settings.

pub(crate) mod case;
pub(crate) mod check;
pub(crate) mod compile;
pub(crate) mod containment;
pub(crate) mod error;
pub(crate) mod globs;
pub(crate) mod grants;
pub mod import;
pub(crate) mod lint;
pub(crate) mod live;
pub(crate) mod load;
pub(crate) mod presets;
pub(crate) mod render;
pub(crate) mod schema;
pub(crate) mod version;
