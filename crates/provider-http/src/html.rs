//! HTML to Markdown for web mounts, bounded so that no page can take the process down or
//! keep it busy: the input size (`max_convert_bytes`), the attributes of one tag the
//! tokenizer reads (`tokenize::MAX_ATTRS`), the nodes the parser may build (one per 8 input
//! bytes), the nesting htmd recurses through (`max_html_depth`; deeper content is
//! flattened to its text), the Markdown built, the time (`timeout_ms`, and the requester going
//! away), and how many conversions run at once (the mount's `max_conversions`, within the
//! process's budget, `budget.rs`). Links and images are made absolute against the page's
//! final URL.
//!
//! htmd walks the tree recursively and cannot be interrupted, so each conversion runs on a
//! thread of its own with a stack sized for the depth limit, html5ever builds the tree into
//! a counting sink, and checks between elements stop the work by unwinding to the thread's
//! top (`resume_unwind`, which runs no panic hook) when a bound is hit.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::budget::{ConversionBudget, Share};
use crate::config::HttpConfig;
use crate::error;
use htmd::element_handler::{ElementHandler, HandlerResult, Handlers};
use html5ever::tendril::StrTendril;
use html5ever::tree_builder::{ElementFlags, NodeOrText, QuirksMode, TreeBuilderOpts, TreeSink};
use html5ever::{Attribute, ExpandedName, QualName, ns};
use markup5ever_rcdom::{Handle, Node, NodeData, RcDom};
use mcpr_core::{Error, ErrorKind, Limit, Result};

/// One node or attribute of the parsed tree is allowed per this many bytes of
/// `max_convert_bytes`: the tree builder can make many elements from few bytes (a misnested
/// formatting tag is re-opened, attributes and all, in every following paragraph), and the
/// tree is what costs memory (about 160 bytes a node, 40 an attribute).
const BYTES_PER_NODE: u64 = 8;

/// The parse is refused once the tree gets this many times `max_html_depth` deep: html5ever
/// scans its stack of open elements at most start tags, so its own work grows with the
/// nesting (5000 nested `<blockquote>` took seconds), and flattening afterwards cannot undo
/// that.
const PARSE_DEPTH_FACTOR: usize = 4;

/// The Markdown built at all levels together may be this many times `max_convert_bytes`
/// (htmd copies each element's Markdown into its parent's, so nesting multiplies it).
const WORK_FACTOR: u64 = 64;

/// What a page too large to convert can be served as instead.
const RAW_HINT: &str = "a mount with html = \"raw\" serves it as HTML";

/// Stack of a conversion thread: a base plus this much per allowed nesting level. htmd
/// recurses through several frames per element: about 3 KiB per level in debug builds, where
/// frames are largest, so this leaves a wide margin.
const STACK_BASE: usize = 2 << 20;
const STACK_PER_LEVEL: usize = 32 << 10;

/// Tags whose text is not content (as htmd is told to skip them).
const SKIPPED: [&str; 5] = ["script", "style", "noscript", "template", "head"];

/// Tags htmd has a handler for; the guard wraps those (`span` excepted: htmd takes a faster
/// path for it only while it has its one handler).
const GUARDED: &[&str] = &[
    "img",
    "a",
    "ol",
    "ul",
    "li",
    "blockquote",
    "code",
    "strong",
    "b",
    "i",
    "em",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "br",
    "hr",
    "table",
    "td",
    "th",
    "tr",
    "tbody",
    "thead",
    "caption",
    "p",
    "pre",
    "head",
    "body",
    "html",
    "address",
    "article",
    "aside",
    "center",
    "dd",
    "details",
    "dialog",
    "dir",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "header",
    "iframe",
    "legend",
    "main",
    "menu",
    "nav",
    "section",
    "summary",
    "tfoot",
    "script",
    "style",
    "noscript",
    "template",
];

/// Elements whose text, when flattened, is kept apart from its neighbours' by a space.
const BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "dd",
    "div",
    "dl",
    "dt",
    "figcaption",
    "figure",
    "footer",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "table",
    "td",
    "th",
    "tr",
    "ul",
];

/// htmd 0.5's block elements (`dom_walker::BLOCK_ELEMENTS`): adjacent elements of any other
/// tag with the same attributes and one text child each are joined into one by htmd.
const HTMD_BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "base",
    "basefont",
    "blockquote",
    "body",
    "caption",
    "center",
    "col",
    "colgroup",
    "dd",
    "details",
    "dialog",
    "dir",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "frame",
    "frameset",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "head",
    "header",
    "hr",
    "html",
    "iframe",
    "legend",
    "li",
    "link",
    "main",
    "menu",
    "menuitem",
    "nav",
    "noframes",
    "ol",
    "optgroup",
    "option",
    "p",
    "param",
    "pre",
    "script",
    "search",
    "section",
    "style",
    "summary",
    "table",
    "tbody",
    "td",
    "textarea",
    "tfoot",
    "th",
    "thead",
    "title",
    "tr",
    "track",
    "ul",
];

/// The mount's conversion settings and the conversions running now.
pub(crate) struct Converter {
    max_bytes: u64,
    max_depth: u32,
    timeout: Duration,
    /// Places to convert in: the mount's share of the process's budget.
    places: Share,
    running: Arc<AtomicUsize>,
}

impl Converter {
    pub(crate) fn new(config: &HttpConfig, budget: &Arc<ConversionBudget>) -> Self {
        Self {
            max_bytes: config.max_convert_bytes,
            max_depth: config.max_html_depth,
            timeout: config.timeout,
            places: budget.share(config.max_conversions),
            running: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Conversions whose thread runs now (a thread keeps its place until it has noticed
    /// that it should stop, so this is also the work in progress).
    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    /// The Markdown of `page`, with links resolved against `base` (the URL the page came
    /// from, after redirects). `out_limit` bounds the Markdown (the read limit).
    pub(crate) async fn markdown(
        &self,
        uri: &str,
        page: Vec<u8>,
        base: url::Url,
        out_limit: u64,
    ) -> Result<String> {
        let size = page.len() as u64;
        if size > self.max_bytes {
            return Err(Error::too_large(
                uri,
                "the page's HTML",
                Some(size),
                Limit::bytes(self.max_bytes, "max_convert_bytes"),
                Some(RAW_HINT),
            ));
        }
        // Waiting here costs nothing: a requester that goes away while queued (the request
        // timeout, a cancelled request) leaves the queue and never starts.
        let permit = self.places.acquire().await?;
        let stop = Arc::new(Stop {
            cancelled: AtomicBool::new(false),
            deadline: Instant::now() + self.timeout,
        });
        // Dropped when this future is (the read timed out or its client went away): the
        // thread then stops at its next check.
        let _cancel = CancelOnDrop(stop.clone());
        let job = Job {
            max_nodes: (self.max_bytes / BYTES_PER_NODE).max(1024) as usize,
            max_depth: self.max_depth as usize,
            out_limit,
            max_work: self.max_bytes.saturating_mul(WORK_FACTOR).max(out_limit),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let gauge = Gauge::enter(&self.running);
        let thread_stop = stop.clone();
        let work = move || {
            // Both are released when the work ends, not when the requester stops waiting,
            // so the limit counts the work really running; and before the answer is sent,
            // so a reader that has its answer sees its conversion finished.
            // The gauge goes first: it never counts more than the permits.
            let held = (gauge, permit);
            if thread_stop.cancelled.load(Ordering::Relaxed) {
                return;
            }
            let out = match catch_unwind(AssertUnwindSafe(|| {
                convert(&page, &base, &job, &thread_stop)
            })) {
                Ok(md) => Ok(md),
                Err(payload) => Err(match payload.downcast::<Halt>() {
                    Ok(halt) => *halt,
                    Err(p) => Halt::Panic(panic_text(p.as_ref())),
                }),
            };
            drop(held);
            let _ = tx.send(out);
        };
        std::thread::Builder::new()
            .name("html-to-markdown".into())
            .stack_size(STACK_BASE + self.max_depth as usize * STACK_PER_LEVEL)
            .spawn(work)
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unavailable,
                    format!("{uri}: cannot start the HTML conversion: {e}"),
                )
                .with_uri(uri)
                .with_detail("temporary", true)
            })?;
        let halt = match rx.await {
            Ok(Ok(md)) => return Ok(md),
            Ok(Err(halt)) => halt,
            Err(_) => Halt::Cancelled,
        };
        Err(halt.error(uri, self, &job))
    }
}

/// One conversion's bounds.
#[derive(Clone, Copy)]
struct Job {
    max_nodes: usize,
    max_depth: usize,
    /// The most Markdown one element may produce.
    out_limit: u64,
    /// The most Markdown all elements together may produce.
    max_work: u64,
}

/// Why a conversion stopped early.
#[derive(Debug)]
enum Halt {
    Cancelled,
    Depth(usize),
    TimedOut,
    Nodes,
    Output,
    Work,
    Panic(String),
}

impl Halt {
    fn error(self, uri: &str, c: &Converter, job: &Job) -> Error {
        match self {
            Halt::TimedOut => Error::new(
                ErrorKind::Timeout,
                format!(
                    "{uri}: converting the page's HTML to Markdown took longer than {} (timeout_ms)",
                    error::human(c.timeout)
                ),
            )
            .with_uri(uri),
            Halt::Nodes => Error::too_large(
                uri,
                "the page's HTML",
                None,
                Limit::of(
                    job.max_nodes as u64,
                    "elements and attributes",
                    format!("one per {BYTES_PER_NODE} bytes of max_convert_bytes"),
                ),
                Some(RAW_HINT),
            ),
            Halt::Depth(limit) => Error::invalid_params(format!(
                "{uri}: the page's HTML nests elements more than {limit} deep ({PARSE_DEPTH_FACTOR} × max_html_depth), too deep to convert to Markdown; a mount with html = \"raw\" serves it as HTML"
            ))
            .with_uri(uri)
            .with_detail("limit", limit as u64),
            Halt::Output => Error::too_large(
                uri,
                "the page's Markdown",
                None,
                Limit::read(job.out_limit),
                None,
            ),
            Halt::Work => Error::too_large(
                uri,
                "the Markdown built across the page's nesting levels",
                None,
                Limit::bytes(job.max_work, format!("{WORK_FACTOR} × max_convert_bytes")),
                Some(RAW_HINT),
            ),
            Halt::Cancelled => Error::internal(format!(
                "{uri}: the HTML conversion was cancelled"
            ))
            .with_uri(uri),
            Halt::Panic(what) => Error::internal(format!(
                "{uri}: the HTML conversion failed: {what}"
            ))
            .with_uri(uri),
        }
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Counts a conversion thread from before its start to its end.
struct Gauge(Arc<AtomicUsize>);

impl Gauge {
    fn enter(n: &Arc<AtomicUsize>) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Self(n.clone())
    }
}

impl Drop for Gauge {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// When a conversion must stop.
struct Stop {
    cancelled: AtomicBool,
    deadline: Instant,
}

impl Stop {
    /// Unwind to the conversion's top when the requester is gone or time is up.
    fn check(&self) {
        if self.cancelled.load(Ordering::Relaxed) {
            halt(Halt::Cancelled);
        }
        if Instant::now() >= self.deadline {
            halt(Halt::TimedOut);
        }
    }
}

struct CancelOnDrop(Arc<Stop>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancelled.store(true, Ordering::Relaxed);
    }
}

/// Stop the conversion; `resume_unwind` does not run the panic hook, so nothing is printed.
fn halt(h: Halt) -> ! {
    resume_unwind(Box::new(h))
}

/// Parse, prepare the tree, write Markdown; runs on the conversion thread.
fn convert(page: &[u8], base: &url::Url, job: &Job, stop: &Arc<Stop>) -> String {
    let text = String::from_utf8_lossy(page);
    let sink = Counted {
        dom: RcDom::default(),
        stop,
        nodes: Cell::new(0),
        max_nodes: job.max_nodes,
        depths: RefCell::new(HashMap::new()),
        max_depth: job.max_depth.saturating_mul(PARSE_DEPTH_FACTOR),
    };
    let opts = TreeBuilderOpts {
        scripting_enabled: true,
        ..Default::default()
    };
    // Fed in pieces, each tag's attributes capped, the time checked between pieces.
    let (dom, _) = crate::tokenize::parse(&text, sink, opts, crate::tokenize::MAX_ATTRS, &|| {
        stop.check()
    });
    drop(text);
    prepare(&dom.document, base, job.max_depth, stop);
    // Added last, so htmd asks it first; it hands each element on to the skip or built-in
    // handler and checks the bounds around that.
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(SKIPPED.to_vec())
        .add_handler(
            GUARDED.to_vec(),
            Guard {
                stop: stop.clone(),
                out_limit: job.out_limit,
                max_work: job.max_work,
                work: AtomicU64::new(0),
            },
        )
        .build();
    let md = converter.tree_to_markdown(&dom.document);
    if md.len() as u64 > job.out_limit {
        halt(Halt::Output);
    }
    md
}

/// html5ever's tree sink for an `RcDom`, counting the nodes and attributes it creates and checking the
/// time as it goes: the parse itself is bounded, whatever the tree builder makes of the page.
struct Counted<'a> {
    dom: RcDom,
    stop: &'a Stop,
    nodes: Cell<usize>,
    max_nodes: usize,
    /// The depth of each element placed in the tree, by address (a node lives as long as
    /// the tree holds it; a new node at a reused address is given its depth when placed).
    /// Children moved by `reparent_children` keep theirs, off by one: a bound on cost, not
    /// the flattening, which measures the finished tree.
    depths: RefCell<HashMap<usize, usize>>,
    max_depth: usize,
}

impl Counted<'_> {
    fn count(&self, attrs: usize) {
        let n = self.nodes.get() + 1 + attrs;
        self.nodes.set(n);
        if n > self.max_nodes {
            halt(Halt::Nodes);
        }
        self.stop.check();
    }

    fn depth(&self, node: &Handle) -> usize {
        self.depths
            .borrow()
            .get(&(Rc::as_ptr(node) as usize))
            .copied()
            .unwrap_or(0)
    }

    /// `child` is placed under a node at `parent_depth`.
    fn placed(&self, parent_depth: usize, child: &NodeOrText<Handle>) {
        if let NodeOrText::AppendNode(node) = child
            && matches!(node.data, NodeData::Element { .. })
        {
            let d = parent_depth + 1;
            if d > self.max_depth {
                halt(Halt::Depth(self.max_depth));
            }
            self.depths
                .borrow_mut()
                .insert(Rc::as_ptr(node) as usize, d);
        }
    }
}

impl TreeSink for Counted<'_> {
    type Handle = Handle;
    type Output = RcDom;
    type ElemName<'b>
        = ExpandedName<'b>
    where
        Self: 'b;

    fn finish(self) -> RcDom {
        self.dom
    }

    // Not kept: RcDom would collect every parse error of a hostile page.
    fn parse_error(&self, _msg: Cow<'static, str>) {}

    fn get_document(&self) -> Handle {
        self.dom.get_document()
    }

    fn elem_name<'b>(&'b self, target: &'b Handle) -> ExpandedName<'b> {
        self.dom.elem_name(target)
    }

    fn create_element(&self, name: QualName, attrs: Vec<Attribute>, flags: ElementFlags) -> Handle {
        self.count(attrs.len());
        self.dom.create_element(name, attrs, flags)
    }

    fn create_comment(&self, text: StrTendril) -> Handle {
        self.count(0);
        self.dom.create_comment(text)
    }

    fn create_pi(&self, target: StrTendril, data: StrTendril) -> Handle {
        self.count(0);
        self.dom.create_pi(target, data)
    }

    fn append(&self, parent: &Handle, child: NodeOrText<Handle>) {
        self.stop.check();
        self.placed(self.depth(parent), &child);
        self.dom.append(parent, child)
    }

    fn append_based_on_parent_node(
        &self,
        element: &Handle,
        prev_element: &Handle,
        child: NodeOrText<Handle>,
    ) {
        self.placed(self.depth(element).max(self.depth(prev_element)), &child);
        self.dom
            .append_based_on_parent_node(element, prev_element, child)
    }

    fn append_doctype_to_document(
        &self,
        name: StrTendril,
        public_id: StrTendril,
        system_id: StrTendril,
    ) {
        self.dom
            .append_doctype_to_document(name, public_id, system_id)
    }

    fn get_template_contents(&self, target: &Handle) -> Handle {
        self.dom.get_template_contents(target)
    }

    fn same_node(&self, x: &Handle, y: &Handle) -> bool {
        self.dom.same_node(x, y)
    }

    fn set_quirks_mode(&self, mode: QuirksMode) {
        self.dom.set_quirks_mode(mode)
    }

    fn append_before_sibling(&self, sibling: &Handle, new_node: NodeOrText<Handle>) {
        self.placed(self.depth(sibling).saturating_sub(1), &new_node);
        self.dom.append_before_sibling(sibling, new_node)
    }

    fn add_attrs_if_missing(&self, target: &Handle, attrs: Vec<Attribute>) {
        // Each repeated `<html>` or `<body>` adds its new attributes to the first one's, and
        // each addition looks at all those already there: the element keeps at most the
        // attributes one tag may have, so thousands of repeats stay linear, and those it
        // takes count as the nodes they may become.
        let NodeData::Element { attrs: have, .. } = &target.data else {
            return;
        };
        let room = crate::tokenize::MAX_ATTRS.saturating_sub(have.borrow().len());
        if room == 0 {
            self.stop.check();
            return;
        }
        let attrs: Vec<Attribute> = attrs.into_iter().take(room).collect();
        self.count(attrs.len());
        self.dom.add_attrs_if_missing(target, attrs)
    }

    fn remove_from_parent(&self, target: &Handle) {
        self.dom.remove_from_parent(target)
    }

    fn reparent_children(&self, node: &Handle, new_parent: &Handle) {
        self.dom.reparent_children(node, new_parent)
    }

    fn is_mathml_annotation_xml_integration_point(&self, handle: &Handle) -> bool {
        self.dom.is_mathml_annotation_xml_integration_point(handle)
    }

    fn maybe_clone_an_option_into_selectedcontent(&self, option: &Handle) {
        self.dom.maybe_clone_an_option_into_selectedcontent(option)
    }
}

/// The tag of an HTML element node.
fn tag(node: &Node) -> Option<&str> {
    match &node.data {
        NodeData::Element { name, .. } if name.ns == ns!(html) => Some(&name.local),
        _ => None,
    }
}

/// One pass over the tree, without recursion, before htmd sees it: links and images made
/// absolute (against `<base href>` when the page has one, itself resolved against the
/// page's URL), and every element `max_depth` levels down replaced by its text, so htmd's
/// recursion stays within the thread's stack.
fn prepare(doc: &Handle, page_url: &url::Url, max_depth: usize, stop: &Stop) {
    let mut base: Option<url::Url> = None;
    let mut stack: Vec<(Handle, usize)> = vec![(doc.clone(), 0)];
    let mut seen = 0u32;
    while let Some((node, depth)) = stack.pop() {
        seen = seen.wrapping_add(1);
        if seen.is_multiple_of(1024) {
            stop.check();
        }
        if let NodeData::Element { attrs, .. } = &node.data {
            let t = tag(&node);
            let link = match t {
                Some("a" | "area") => Some("href"),
                Some("img") => Some("src"),
                Some("base") if base.is_none() => {
                    base = attrs
                        .borrow()
                        .iter()
                        .find(|a| &*a.name.local == "href")
                        .and_then(|a| page_url.join(a.value.trim()).ok());
                    None
                }
                _ => None,
            };
            if let Some(attr) = link {
                let base = base.as_ref().unwrap_or(page_url);
                for a in attrs.borrow_mut().iter_mut() {
                    if &*a.name.local == attr
                        && let Ok(abs) = base.join(a.value.trim())
                    {
                        a.value = StrTendril::from(abs.as_str());
                    }
                }
            }
            if depth >= max_depth && t.is_none_or(|t| !SKIPPED.contains(&t)) {
                flatten(&node);
                continue;
            }
        }
        join_alike(&node);
        let children = node.children.borrow();
        stack.extend(children.iter().rev().map(|c| (c.clone(), depth + 1)));
    }
}

/// Join adjacent children that htmd would join (`<b>a</b><b>b</b>` is `**ab**`), in one
/// pass: htmd does it by removing each from the middle of the list, which is quadratic in
/// the number of children (a page of 2 MiB of `<b>x</b>` took minutes) and cannot be
/// interrupted. Afterwards htmd finds nothing left to join.
fn join_alike(node: &Handle) {
    let mut children = node.children.borrow_mut();
    if children.len() < 2 {
        return;
    }
    let old = std::mem::take(&mut *children);
    let mut kept: Vec<Handle> = Vec::with_capacity(old.len());
    for child in old {
        if let Some(prev) = kept.last()
            && let Some(text) = joinable(prev, &child)
        {
            let first = prev.children.borrow();
            if let NodeData::Text { contents } = &first[0].data {
                contents.borrow_mut().push_tendril(&text);
            }
            continue;
        }
        kept.push(child);
    }
    *children = kept;
}

/// htmd's rule (`dom_walker::can_combine`): two elements, not block and not links, of the same
/// tag (or `b`/`strong`, `i`/`em`) and attributes, each holding just one text. The text of
/// the second, when they are joinable.
fn joinable(a: &Node, b: &Node) -> Option<StrTendril> {
    let (
        NodeData::Element {
            name: n1,
            attrs: a1,
            template_contents: t1,
            mathml_annotation_xml_integration_point: m1,
        },
        NodeData::Element {
            name: n2,
            attrs: a2,
            template_contents: t2,
            mathml_annotation_xml_integration_point: m2,
        },
    ) = (&a.data, &b.data)
    else {
        return None;
    };
    let (l1, l2) = (&*n1.local, &*n2.local);
    if HTMD_BLOCKS.contains(&l1) || l1 == "a" {
        return None;
    }
    let same = n1 == n2
        || matches!(
            (l1, l2),
            ("i", "em") | ("em", "i") | ("b", "strong") | ("strong", "b")
        );
    if !same || m1 != m2 || *a1.borrow() != *a2.borrow() {
        return None;
    }
    if t1.borrow().is_some() || t2.borrow().is_some() {
        return None;
    }
    let (c1, c2) = (a.children.borrow(), b.children.borrow());
    match (c1.as_slice(), c2.as_slice()) {
        ([x], [y]) => match (&x.data, &y.data) {
            (NodeData::Text { .. }, NodeData::Text { contents }) => Some(contents.borrow().clone()),
            _ => None,
        },
        _ => None,
    }
}

/// Replace the children of `node` by one text node holding the text under it (not that of
/// scripts, styles and the like), blocks kept apart by a space.
fn flatten(node: &Handle) {
    let mut text = String::new();
    let mut stack: Vec<Handle> = node.children.borrow().iter().rev().cloned().collect();
    while let Some(n) = stack.pop() {
        match &n.data {
            NodeData::Text { contents } => text.push_str(&contents.borrow()),
            NodeData::Element { .. } => {
                let t = tag(&n);
                if t.is_some_and(|t| SKIPPED.contains(&t)) {
                    continue;
                }
                let block = t.is_some_and(|t| BLOCKS.contains(&t));
                if block && !text.ends_with(' ') && !text.is_empty() {
                    text.push(' ');
                }
                stack.extend(n.children.borrow().iter().rev().cloned());
            }
            _ => {}
        }
    }
    let leaf = Node::new(NodeData::Text {
        contents: RefCell::new(StrTendril::from(text.as_str())),
    });
    leaf.parent.set(Some(Rc::downgrade(node)));
    // The old subtree is dropped here; markup5ever_rcdom drops nodes without recursion.
    let old = std::mem::replace(&mut *node.children.borrow_mut(), vec![leaf]);
    drop(old);
}

/// Wraps htmd's handler of each element: checks the time before, and the Markdown made
/// after (one element's against the read limit, all elements' together against the work
/// budget), stopping the conversion when a bound is passed.
struct Guard {
    stop: Arc<Stop>,
    out_limit: u64,
    max_work: u64,
    work: AtomicU64,
}

impl ElementHandler for Guard {
    fn handle(&self, handlers: &dyn Handlers, element: htmd::Element) -> Option<HandlerResult> {
        self.stop.check();
        // htmd pads every cell to its column's width: one long cell and many short rows
        // would make rows × width bytes before the size could be checked after.
        if element.tag == "table" && table_size(element.node) > self.out_limit {
            halt(Halt::Output);
        }
        let out = handlers.fallback(element);
        if let Some(r) = &out {
            let len = r.content.len() as u64;
            if len > self.out_limit {
                halt(Halt::Output);
            }
            if self.work.fetch_add(len, Ordering::Relaxed) + len > self.max_work {
                halt(Halt::Work);
            }
        }
        self.stop.check();
        out
    }
}

/// About how many bytes htmd's Markdown of `table` takes, measured on the tree before it is
/// made: every row as wide as the widest cell of each column (cells measured by their text,
/// link and image addresses, and a few bytes per element), plus the separators.
fn table_size(table: &Handle) -> u64 {
    let mut widths: Vec<u64> = Vec::new();
    let mut rows = 0u64;
    let mut stack: Vec<Handle> = table.children.borrow().iter().rev().cloned().collect();
    while let Some(n) = stack.pop() {
        match tag(&n) {
            // A nested table is a cell's content, measured with its cell.
            Some("table") => {}
            Some("tr") => {
                rows += 1;
                let cells = n.children.borrow();
                let cells = cells.iter().filter(|c| matches!(tag(c), Some("td" | "th")));
                for (i, cell) in cells.enumerate() {
                    let w = markdown_size(cell);
                    if i == widths.len() {
                        widths.push(w);
                    } else if widths[i] < w {
                        widths[i] = w;
                    }
                }
            }
            _ => stack.extend(n.children.borrow().iter().rev().cloned()),
        }
    }
    let row: u64 = widths.iter().map(|w| w + 3).sum::<u64>() + 2;
    row.saturating_mul(rows + 1)
}

/// An upper estimate of the Markdown under `node`: its text, its attribute values (link and
/// image addresses), and 8 bytes per element for the markup.
fn markdown_size(node: &Handle) -> u64 {
    let mut size = 0u64;
    let mut stack = vec![node.clone()];
    while let Some(n) = stack.pop() {
        match &n.data {
            NodeData::Text { contents } => size += contents.borrow().len() as u64,
            NodeData::Element { attrs, .. } => {
                size += 8;
                size += attrs
                    .borrow()
                    .iter()
                    .map(|a| a.value.len() as u64)
                    .sum::<u64>();
                stack.extend(n.children.borrow().iter().cloned());
            }
            _ => {}
        }
    }
    size
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: Job = Job {
        max_nodes: 1 << 20,
        max_depth: 256,
        out_limit: 64 << 20,
        max_work: 1 << 30,
    };

    fn run(page: &str, max_depth: usize) -> std::result::Result<String, Halt> {
        run_job(page, Job { max_depth, ..JOB })
    }

    fn run_job(page: &str, job: Job) -> std::result::Result<String, Halt> {
        let max_depth = job.max_depth;
        let stop = Arc::new(Stop {
            cancelled: AtomicBool::new(false),
            deadline: Instant::now() + Duration::from_secs(600),
        });
        let base = url::Url::parse("https://d.example/a/b.html").unwrap();
        let page = page.as_bytes().to_vec();
        std::thread::Builder::new()
            .stack_size(STACK_BASE + max_depth * STACK_PER_LEVEL)
            .spawn(move || {
                catch_unwind(AssertUnwindSafe(|| convert(&page, &base, &job, &stop)))
                    .map_err(|p| *p.downcast::<Halt>().unwrap())
            })
            .unwrap()
            .join()
            .unwrap()
    }

    /// A repeated `<body>` adds its new attributes to the first one's, each addition
    /// checked against all those already there: the merged element keeps at most
    /// `MAX_ATTRS`, so a page of 4000 `<body>` tags with new attributes each stays cheap
    /// (before the cap, twice as many ran past a 10-minute deadline).
    #[test]
    fn repeated_body_tags_merge_at_most_the_attribute_cap() {
        let page: String = (0..4000)
            .map(|k| {
                let attrs: String = (0..32).map(|i| format!(" a{k}x{i}")).collect();
                format!("<body{attrs}>")
            })
            .collect();
        let t = Instant::now();
        let job = Job {
            max_nodes: 1 << 20,
            ..JOB
        };
        let md = run_job(&(page + "text"), job).unwrap();
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert_eq!(md, "text");
    }

    /// The one-pass join gives what htmd's own joining gives.
    #[test]
    fn joining_alike_elements_matches_htmd() {
        let page = r#"<p><b>a</b><strong>b</strong> <i>c</i><em>d</em><u>e</u><u>f</u><u class="x">g</u>
            <a href="https://x.example/">h</a><a href="https://x.example/">i</a><code>j</code><code>k</code>
            <span class="q">l</span><span class="q">m</span><b>n<i>o</i></b><b>p</b></p><p>q</p><p>r</p>"#;
        let plain = htmd::HtmlToMarkdown::builder()
            .skip_tags(SKIPPED.to_vec())
            .build()
            .convert(page)
            .unwrap();
        assert_eq!(run(page, 256).unwrap(), plain);
    }

    /// The bounds checked around htmd's handlers unwind through htmd cleanly, and the thread
    /// answers which bound it was.
    #[test]
    fn output_and_work_bounds_stop_the_walk() {
        let long = format!("<div><p>{}</p></div>", "word ".repeat(1000));
        let out = run_job(
            &long,
            Job {
                out_limit: 1000,
                ..JOB
            },
        );
        assert!(matches!(out, Err(Halt::Output)), "{out:?}");
        let nested: String = (0..50)
            .map(|_| format!("<blockquote><p>{}</p>", "word ".repeat(100)))
            .collect();
        run_job(&nested, JOB).unwrap();
        let out = run_job(
            &nested,
            Job {
                max_work: 100_000,
                ..JOB
            },
        );
        assert!(matches!(out, Err(Halt::Work)), "{out:?}");
        let out = run_job(
            &nested,
            Job {
                max_nodes: 60,
                ..JOB
            },
        );
        assert!(matches!(out, Err(Halt::Nodes)), "{out:?}");
    }
}
