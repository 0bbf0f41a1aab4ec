//! The binary's configuration loader and provider registry as a library, so the fuzz targets
//! (`fuzz/`) load configuration files exactly as `mcp-resources` does.

pub mod config;
pub mod providers;
