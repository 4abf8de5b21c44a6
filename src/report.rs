//! Rendering of a [`lockstep_query::diagnose::Diagnosis`]: [`text::render`] for the terminal
//! (`lockstep diagnose`, `lockstep demo`) and [`html::render`] for the self-contained HTML report
//! (`--report FILE.html`). Both read only the diagnosis (its JSON fields and, for the charts,
//! its lanes); the analysis is the query crate's.

mod axis;
pub mod html;
pub mod text;
