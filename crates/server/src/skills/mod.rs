//! Skills (SEP-2640): an organisation's agent skills published from the skills folders of
//! any files, git or s3 mount. `frontmatter` parses a `SKILL.md`'s YAML; `catalog` finds
//! the skills through the providers' operations and keeps their manifests' digests.

pub mod catalog;
pub mod frontmatter;

pub use catalog::{Catalog, CatalogStats, SkillEntry, SkillFile, SkillSource};
