//! Where the memory live at a moment was allocated: allocations grouped by their *site*, the
//! first frame (innermost first) that is user code — not torch, not an installed package, not a
//! frozen import, not C++. Owns the site rule and the grouping; the categories come from
//! [`super::categories`].

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::categories::{Category, Classified, live_at};
use super::{DeviceRun, stack_strings};
use crate::snapshot::{Snapshot, StackId};

/// Site of allocations with no stack recorded.
pub const NO_FRAMES: &str = "<no frames recorded>";
/// Site of allocations whose every frame is library code.
pub const LIBRARY_ONLY: &str = "<library code only>";

/// Allocations of one site.
#[derive(Debug, Clone, Serialize)]
pub struct Site {
    /// `file:line:function` of the first user frame (or [`NO_FRAMES`] / [`LIBRARY_ONLY`]).
    pub site: String,
    /// Σ block sizes.
    pub bytes: u64,
    /// Allocations.
    pub count: u64,
    /// The category holding most of the bytes.
    pub category: Category,
    /// Full stack of the largest allocation, `file:line:function`, innermost first.
    pub stack: Vec<String>,
}

/// A frame is library code (skipped when looking for the site).
pub fn is_library_frame(filename: &str) -> bool {
    !filename.ends_with(".py")
        || filename.contains("/site-packages/")
        || filename.contains("/dist-packages/")
        || filename.contains("/torch/")
        || filename.contains("<frozen")
        || filename.contains("\\site-packages\\")
        || filename.contains("\\dist-packages\\")
        || filename.contains("\\torch\\")
}

/// The site key of a stack.
pub fn site_of(snapshot: &Snapshot, id: StackId) -> String {
    let frames = snapshot.stacks.frames(id);
    if frames.is_empty() {
        return NO_FRAMES.to_string();
    }
    frames
        .iter()
        .find(|f| !is_library_frame(snapshot.stacks.str(f.filename)))
        .map_or_else(
            || LIBRARY_ONLY.to_string(),
            |f| {
                format!(
                    "{}:{}:{}",
                    snapshot.stacks.str(f.filename),
                    f.line,
                    snapshot.stacks.str(f.name)
                )
            },
        )
}

#[derive(Debug, Default)]
struct Group {
    bytes: u64,
    count: u64,
    by_category: [u64; 7],
    largest: (u64, StackId),
}

/// The `limit` largest sites among allocations allocated at state `s`.
pub(crate) fn top_sites(
    snapshot: &Snapshot,
    run: &DeviceRun<'_>,
    classified: &Classified,
    s: u32,
    limit: usize,
) -> Vec<Site> {
    let mut key_of: FxHashMap<StackId, usize> = FxHashMap::default();
    let mut keys: Vec<String> = Vec::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut by_key: FxHashMap<String, usize> = FxHashMap::default();
    for (k, r) in live_at(&run.records, s) {
        let g = match key_of.get(&r.frames) {
            Some(&g) => g,
            None => {
                let key = site_of(snapshot, r.frames);
                let g = match by_key.get(&key) {
                    Some(&g) => g,
                    None => {
                        groups.push(Group::default());
                        keys.push(key.clone());
                        by_key.insert(key, groups.len() - 1);
                        groups.len() - 1
                    }
                };
                key_of.insert(r.frames, g);
                g
            }
        };
        if let Some(group) = groups.get_mut(g) {
            group.bytes = group.bytes.saturating_add(r.size);
            group.count += 1;
            let c = classified.category(k);
            if let Some(slot) = Category::ALL
                .iter()
                .position(|x| *x == c)
                .and_then(|i| group.by_category.get_mut(i))
            {
                *slot = slot.saturating_add(r.size);
            }
            if r.size > group.largest.0 || group.count == 1 {
                group.largest = (r.size, r.frames);
            }
        }
    }
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by(|a, b| {
        let (ga, gb) = (&groups[*a], &groups[*b]);
        gb.bytes
            .cmp(&ga.bytes)
            .then_with(|| keys[*a].cmp(&keys[*b]))
    });
    order
        .into_iter()
        .take(limit)
        .filter_map(|g| {
            let group = groups.get(g)?;
            let dominant = group
                .by_category
                .iter()
                .enumerate()
                .max_by(|(i, a), (j, b)| a.cmp(b).then(j.cmp(i)))
                .and_then(|(i, _)| Category::ALL.get(i).copied())
                .unwrap_or(Category::Unknown);
            Some(Site {
                site: keys.get(g)?.clone(),
                bytes: group.bytes,
                count: group.count,
                category: dominant,
                stack: stack_strings(snapshot, group.largest.1),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_frames() {
        assert!(is_library_frame(
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/modules/module.py"
        ));
        assert!(is_library_frame("<frozen runpy>"));
        assert!(is_library_frame("??"));
        assert!(is_library_frame("CUDACachingAllocator.cpp"));
        assert!(!is_library_frame("/opt/job/train.py"));
    }
}
