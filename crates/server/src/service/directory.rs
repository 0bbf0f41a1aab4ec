//! `resources/directory/read` (SEP-2640) in protocol-neutral terms: one page of a
//! directory's direct children from the mount that owns it, with a signed cursor bound to
//! that directory.

use mcpr_core::{Error, PageRequest, ResourceMeta, Result};
use sha2::Digest as _;

use super::{IN_DIRECTORY, Service, hints_for, invalid_cursor, parse_uri};
use crate::grant::Grant;
use crate::layers::metered;

/// Bytes of the directory URI's hash a cursor carries: a cursor continues the directory it
/// came from, not another one of the same mount.
const DIR_TAG_LEN: usize = 8;

/// One page of a directory read.
#[derive(Debug, Clone)]
pub struct DirectoryPage {
    /// The children: files as listed, subfolders with `mimeType` `inode/directory`.
    pub items: Vec<ResourceMeta>,
    /// The signed cursor of the next page, `None` after the last.
    pub next_cursor: Option<String>,
    /// Cache hints for this caller (the mount's, as a read of the directory has).
    pub hints: mcpr_core::CacheHints,
}

fn dir_tag(uri: &str) -> [u8; DIR_TAG_LEN] {
    let digest = sha2::Sha256::digest(uri.as_bytes());
    let mut tag = [0; DIR_TAG_LEN];
    tag.copy_from_slice(&digest[..DIR_TAG_LEN]);
    tag
}

impl Service {
    /// The direct children of directory `uri` for a caller holding `grant`, one page of at
    /// most the server's page size, from `cursor` (the previous page's
    /// [`DirectoryPage::next_cursor`]). A URI of a mount the caller may not see is not
    /// found; a URI that names anything but a directory (or a mount without directories) is
    /// invalid params, as SEP-2640 asks; a cursor minted for another directory, or not by
    /// this server, is [`mcpr_core::ErrorKind::InvalidCursor`].
    pub async fn read_directory(
        &self,
        grant: Option<&Grant>,
        uri: &str,
        cursor: Option<&str>,
    ) -> Result<DirectoryPage> {
        metered(&self.state.metrics, "resources/directory/read", async {
            match self.skill_folder(grant, uri).await? {
                None => {
                    let mut page = self.read_directory_at(grant, uri, cursor).await?;
                    self.describe_skill_files(grant, &mut page.items).await?;
                    Ok(page)
                }
                Some(folder) => {
                    // A skill's folder (or one under it): read the mount's folder, name
                    // the children as skill URIs.
                    let mut page = self
                        .read_directory_at(grant, &folder.target, cursor)
                        .await
                        .map_err(|e| super::skills::as_asked(e, uri, &folder.target))?;
                    // Described while still named by their mount URIs, which is how the
                    // catalog knows its skills' files.
                    self.describe_skill_files(grant, &mut page.items).await?;
                    // Children are named by their own names under the folder asked, as the
                    // catalog names a skill's files: a link to a folder elsewhere lists
                    // its children under their own paths, which are not the skill's, and
                    // are not shown, as the skill's manifest leaves them out.
                    let root = folder.skill_root.as_str();
                    page.items.retain(|m| {
                        m.uri
                            .trim_end_matches('/')
                            .strip_prefix(root)
                            .is_some_and(|r| r.starts_with('/'))
                    });
                    for m in &mut page.items {
                        let name = m
                            .uri
                            .trim_end_matches('/')
                            .rsplit('/')
                            .next()
                            .unwrap_or_default()
                            .to_owned();
                        m.uri = format!("{}/{name}", folder.asked);
                    }
                    Ok(page)
                }
            }
        })
        .await
    }

    async fn read_directory_at(
        &self,
        grant: Option<&Grant>,
        uri: &str,
        cursor: Option<&str>,
    ) -> Result<DirectoryPage> {
        let parsed = parse_uri(uri)?;
        let mount = self
            .visible_route(grant, &parsed)
            .ok_or_else(|| Error::not_found(parsed.as_str()))?;
        let tag = dir_tag(parsed.as_str());
        let after = match cursor {
            None => None,
            Some(c) => match self.open_cursor(c, IN_DIRECTORY)? {
                Some((m, rest))
                    if m == mount.index
                        && rest.len() > DIR_TAG_LEN
                        && rest[..DIR_TAG_LEN] == tag =>
                {
                    Some(rest[DIR_TAG_LEN..].to_vec())
                }
                _ => {
                    return Err(invalid_cursor(
                        "it does not continue a read of this directory",
                    ));
                }
            },
        };
        let limit = self.state.settings.page_size.max(1);
        let page = self
            .layered(mount)
            .read_directory(&parsed, PageRequest { after, limit })
            .await?;
        let next_cursor = page
            .next
            .map(|pos| self.tagged_cursor(mount.index, IN_DIRECTORY, &[&tag, &pos]));
        let mine = mount.provider.info().cache;
        Ok(DirectoryPage {
            items: page.items,
            next_cursor,
            hints: hints_for(grant, page.hints.map_or(mine, |h| h.min(mine))),
        })
    }
}
