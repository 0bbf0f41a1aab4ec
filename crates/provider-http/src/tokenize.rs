//! A page handed to html5ever in bounded pieces: attributes past [`MAX_ATTRS`] in one tag
//! ([`MAX_FORMATTING_ATTRS`] in a formatting element's) are dropped before the tokenizer
//! sees them, and the time and cancellation are checked
//! between pieces of at most [`PIECE`] bytes.
//!
//! html5ever's tokenizer checks each new attribute of a tag against all the tag's earlier
//! ones, so a tag of n distinct attributes costs n²/2 comparisons (200 000 attributes took
//! 24 s) before any tree sink hears of the tag: only a pass ahead of the tokenizer can bound
//! that. This pass follows the tokenizer's own states wherever they decide where a tag
//! begins and ends (data, tags, comments, doctypes, bogus comments, CDATA sections, raw text
//! and the escapes of script text), so it counts the attributes the tokenizer would count.
//! What only the tree builder knows (whether a `<script>`, `<style>`, `<title>`... start tag
//! switches the tokenizer to raw text, whether `<![CDATA[` opens a section) it learns from
//! the tree builder itself, having first fed it everything before that point.

use std::cell::Cell;

use html5ever::TokenizerResult;
use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::{RawKind, ScriptEscapeKind};
use html5ever::tokenizer::{
    BufferQueue, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};
use html5ever::tree_builder::{TreeBuilder, TreeBuilderOpts, TreeSink};

/// The most attributes of one tag the tokenizer is given; the rest of the tag up to its `>`
/// is dropped. Real pages stay far below it (a few dozen at most), and at this cap the
/// tokenizer's duplicate checks cost at most 256 comparisons per attribute.
pub(crate) const MAX_ATTRS: usize = 256;

/// The most attributes of a formatting element's start tag (`<a>`, `<b>`, `<font>`...) the
/// tokenizer is given. The tree builder compares each new formatting element with every one
/// still open or to be re-opened, sorting both attribute lists each time (the "Noah's Ark"
/// clause): a thousand distinct `<b>` of 256 attributes took 330 s (debug build). Links keep
/// `href` and `title` in practice well within this.
pub(crate) const MAX_FORMATTING_ATTRS: usize = 32;

/// The formatting elements of the HTML parsing rules.
const FORMATTING: [&str; 14] = [
    "a", "b", "big", "code", "em", "font", "i", "nobr", "s", "small", "strike", "strong", "tt", "u",
];

/// The most bytes fed to the tokenizer between two checks of the time and cancellation.
const PIECE: usize = 64 << 10;

/// Start tags that the tree builder may switch to raw text (or plain text) after.
const RAW_NAMES: [&str; 10] = [
    "script",
    "style",
    "xmp",
    "iframe",
    "noembed",
    "noframes",
    "noscript",
    "textarea",
    "title",
    "plaintext",
];

/// What the tree builder told the tokenizer to do after a start tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Told {
    Continue,
    Raw(RawKind),
    Plaintext,
}

/// The tree builder, with what it last told the tokenizer about its state recorded.
struct Watch<S> {
    inner: S,
    told: Cell<Told>,
    /// Each tag the tokenizer emitted, as [`Feeder::tags`] has them.
    #[cfg(test)]
    tags: std::cell::RefCell<Vec<SeenTag>>,
}

impl<S: TokenSink> TokenSink for Watch<S> {
    type Handle = S::Handle;

    fn process_token(&self, token: Token, line_number: u64) -> TokenSinkResult<S::Handle> {
        #[cfg(test)]
        if let Token::TagToken(t) = &token {
            let mut names: Vec<String> = t.attrs.iter().map(|a| a.name.local.to_string()).collect();
            names.sort();
            names.dedup();
            let end = t.kind == html5ever::tokenizer::EndTag;
            self.tags
                .borrow_mut()
                .push((end, t.name.to_string(), names));
        }
        let r = self.inner.process_token(token, line_number);
        match &r {
            TokenSinkResult::RawData(k) => self.told.set(Told::Raw(*k)),
            TokenSinkResult::Plaintext => self.told.set(Told::Plaintext),
            _ => {}
        }
        r
    }

    fn end(&self) {
        self.inner.end()
    }

    fn adjusted_current_node_present_but_not_in_html_namespace(&self) -> bool {
        self.inner
            .adjusted_current_node_present_but_not_in_html_namespace()
    }
}

/// Parse `text` as a document into `sink`, as `html5ever::parse_document` would, but with
/// each tag's attributes capped at `max_attrs` ([`MAX_ATTRS`] outside tests) and `check`
/// called between pieces (it stops the parse by unwinding). Also answers how many
/// attributes were dropped.
pub(crate) fn parse<S: TreeSink>(
    text: &str,
    sink: S,
    opts: TreeBuilderOpts,
    max_attrs: usize,
    check: &dyn Fn(),
) -> (S::Output, usize) {
    let tb = TreeBuilder::new(sink, opts);
    let tok = Tokenizer::new(
        Watch {
            inner: tb,
            told: Cell::new(Told::Continue),
            #[cfg(test)]
            tags: Default::default(),
        },
        TokenizerOpts::default(),
    );
    let mut f = Feeder {
        text,
        tok,
        queue: BufferQueue::default(),
        out: String::new(),
        mark: 0,
        fed: 0,
        dropped: 0,
        max_attrs,
        check,
        #[cfg(test)]
        tags: Vec::new(),
    };
    f.scan();
    f.feed_to(text.len());
    f.tok.end();
    #[cfg(test)]
    LAST_TAGS.with(|t| *t.borrow_mut() = (f.tags, f.tok.sink.tags.take()));
    (f.tok.sink.inner.sink.finish(), f.dropped)
}

#[cfg(test)]
thread_local! {
    /// The tags of this thread's last parse: as the pass saw them, as the tokenizer did.
    static LAST_TAGS: std::cell::RefCell<(Vec<SeenTag>, Vec<SeenTag>)> = Default::default();
}

/// The tokenizer's whitespace (a CR is read as a LF before any state sees it).
fn ws(c: u8) -> bool {
    matches!(c, b'\t' | b'\n' | b'\x0C' | b'\r' | b' ')
}

/// The tag states of the tokenizer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tag {
    Name,
    BeforeAttr,
    AttrName,
    AfterAttrName,
    BeforeValue,
    DoubleQuoted,
    SingleQuoted,
    Unquoted,
    AfterQuoted,
    SelfClosing,
}

/// The script data states after `<` or inside `<!--` escapes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Script {
    Data,
    LessThan,
    EscapeStart,
    EscapeStartDash,
    Escaped(ScriptEscapeKind),
    Dash(ScriptEscapeKind),
    DashDash(ScriptEscapeKind),
    EscapedLessThan(ScriptEscapeKind),
}

struct Feeder<'t, S: TreeSink> {
    text: &'t str,
    tok: Tokenizer<Watch<TreeBuilder<S::Handle, S>>>,
    queue: BufferQueue,
    /// The rewritten text not yet fed.
    out: String,
    /// `text[mark..]` is not yet copied into `out`.
    mark: usize,
    /// Where in `text` the last feed ended.
    fed: usize,
    dropped: usize,
    max_attrs: usize,
    check: &'t dyn Fn(),
    /// Each tag the pass saw end: end tag or not, name, attribute names (for the tests that
    /// compare them with the tokenizer's).
    #[cfg(test)]
    tags: Vec<SeenTag>,
}

#[cfg(test)]
type SeenTag = (bool, String, Vec<String>);

impl<S: TreeSink> Feeder<'_, S> {
    /// Copy the text up to `p` (a position before an ASCII byte, or the end) to the output.
    fn copy_to(&mut self, p: usize) {
        if p > self.mark {
            self.out.push_str(&self.text[self.mark..p]);
            self.mark = p;
        }
    }

    /// Feed the tokenizer everything up to `p`, in pieces, checking between them.
    fn feed_to(&mut self, p: usize) {
        self.copy_to(p);
        self.fed = p;
        let out = std::mem::take(&mut self.out);
        let mut rest = out.as_str();
        while !rest.is_empty() {
            let mut cut = rest.len().min(PIECE);
            while !rest.is_char_boundary(cut) {
                cut += 1;
            }
            let (piece, tail) = rest.split_at(cut);
            rest = tail;
            self.queue.push_back(StrTendril::from(piece));
            // A `</script>` pauses the tokenizer; feeding again resumes it.
            while !matches!(self.tok.feed(&self.queue), TokenizerResult::Done) {}
            (self.check)();
        }
        self.out = out;
        self.out.clear();
    }

    /// Feed what is pending once it is a piece's worth.
    fn maybe_feed(&mut self, p: usize) {
        if p - self.fed >= PIECE {
            self.feed_to(p);
        }
    }

    /// The position after the first `>` at or after `from`, or the end.
    fn after_gt(&self, from: usize) -> usize {
        self.after(from, ">")
    }

    /// The position after the first `pat` at or after `from`, or the end.
    fn after(&self, from: usize, pat: &str) -> usize {
        let from = from.min(self.text.len());
        self.text[from..]
            .find(pat)
            .map_or(self.text.len(), |i| from + i + pat.len())
    }

    /// The data state, from the start to the end of the text (or plain text).
    fn scan(&mut self) {
        let b = self.text.as_bytes();
        let mut i = 0;
        while let Some(lt) = self.text[i..].find('<') {
            let p = i + lt;
            self.maybe_feed(p);
            let at = |k: usize| b.get(p + k).copied();
            i = match at(1) {
                Some(c) if c.is_ascii_alphabetic() => {
                    let (end, name_end) = self.tag(p + 1, p + 2, false);
                    let name = &self.text[p + 1..name_end];
                    if let Some(name) = RAW_NAMES.iter().find(|r| r.eq_ignore_ascii_case(name)) {
                        // Only the tree builder knows what follows: ask it.
                        self.tok.sink.told.set(Told::Continue);
                        self.feed_to(end);
                        match self.tok.sink.told.get() {
                            Told::Continue => end,
                            Told::Plaintext => return,
                            Told::Raw(RawKind::ScriptData | RawKind::ScriptDataEscaped(_)) => {
                                self.script(end)
                            }
                            Told::Raw(RawKind::Rcdata | RawKind::Rawtext) => self.raw(end, name),
                        }
                    } else {
                        end
                    }
                }
                Some(b'/') => match at(2) {
                    Some(c) if c.is_ascii_alphabetic() => self.tag(p + 2, p + 3, true).0,
                    Some(b'>') => p + 3,
                    Some(_) => self.after_gt(p + 2),
                    None => return,
                },
                Some(b'!') => {
                    let rest = &b[p + 2..];
                    if rest.starts_with(b"--") {
                        self.comment(p + 4)
                    } else if rest.len() >= 7 && rest[..7].eq_ignore_ascii_case(b"doctype") {
                        // Every doctype state ends at the first `>`.
                        self.after_gt(p + 9)
                    } else if rest.starts_with(b"[CDATA[") {
                        self.feed_to(p);
                        if self
                            .tok
                            .sink
                            .adjusted_current_node_present_but_not_in_html_namespace()
                        {
                            self.after(p + 9, "]]>")
                        } else {
                            self.after_gt(p + 2)
                        }
                    } else {
                        self.after_gt(p + 2)
                    }
                }
                Some(b'?') => self.after_gt(p + 1),
                Some(_) => p + 1,
                None => return,
            };
        }
    }

    /// A comment whose text starts at `from` (after `<!--`): it ends at once on `>` or
    /// `->`, else at the first `-->` or `--!>`.
    fn comment(&self, from: usize) -> usize {
        let rest = &self.text.as_bytes()[from.min(self.text.len())..];
        if rest.starts_with(b">") {
            return from + 1;
        }
        if rest.starts_with(b"->") {
            return from + 2;
        }
        let a = self.after(from, "-->");
        let b = self.after(from, "--!>");
        a.min(b)
    }

    /// The tag states for the tag whose name starts at `name_start`, from `from` in the tag
    /// name state; the position after the tag's `>` (or the end) and where its name ended. Attributes past the cap are left out of the
    /// output, up to the `>`, which the tokenizer then reads in the state it was in before
    /// the first one left out: every such state ends the tag on `>`.
    fn tag(&mut self, name_start: usize, from: usize, end_tag: bool) -> (usize, usize) {
        let b = self.text.as_bytes();
        let mut st = Tag::Name;
        let mut cap = self.max_attrs;
        #[cfg(test)]
        let mut names: Vec<String> = Vec::new();
        #[cfg(test)]
        let mut attr_start = 0;
        let mut name_end = from.min(b.len());
        let mut attrs = 0usize;
        let mut dropping = false;
        let mut j = from;
        while j < b.len() {
            let c = b[j];
            #[cfg(test)]
            let was = st;
            let mut new_attr = false;
            let mut end = false;
            match st {
                Tag::Name => {
                    name_end = j + 1;
                    if ws(c) {
                        name_end = j;
                        st = Tag::BeforeAttr;
                    } else if c == b'/' {
                        name_end = j;
                        st = Tag::SelfClosing;
                    } else if c == b'>' {
                        name_end = j;
                        end = true;
                    }
                }
                Tag::BeforeAttr | Tag::AfterAttrName => {
                    if ws(c) {
                    } else if c == b'/' {
                        st = Tag::SelfClosing;
                    } else if c == b'>' {
                        end = true;
                    } else if c == b'=' && st == Tag::AfterAttrName {
                        st = Tag::BeforeValue;
                    } else {
                        new_attr = true;
                        st = Tag::AttrName;
                    }
                }
                Tag::AttrName => {
                    if ws(c) {
                        st = Tag::AfterAttrName;
                    } else if c == b'/' {
                        st = Tag::SelfClosing;
                    } else if c == b'=' {
                        st = Tag::BeforeValue;
                    } else if c == b'>' {
                        end = true;
                    }
                }
                Tag::BeforeValue => {
                    if ws(c) {
                    } else if c == b'"' {
                        st = Tag::DoubleQuoted;
                    } else if c == b'\'' {
                        st = Tag::SingleQuoted;
                    } else if c == b'>' {
                        end = true;
                    } else {
                        st = Tag::Unquoted;
                    }
                }
                Tag::DoubleQuoted | Tag::SingleQuoted => {
                    let q = if st == Tag::DoubleQuoted { '"' } else { '\'' };
                    match self.text[j..].find(q) {
                        Some(k) => {
                            j += k;
                            st = Tag::AfterQuoted;
                        }
                        None => j = b.len(),
                    }
                }
                Tag::Unquoted => {
                    if ws(c) {
                        st = Tag::BeforeAttr;
                    } else if c == b'>' {
                        end = true;
                    }
                }
                Tag::AfterQuoted | Tag::SelfClosing => {
                    if ws(c) && st == Tag::AfterQuoted {
                        st = Tag::BeforeAttr;
                    } else if c == b'/' && st == Tag::AfterQuoted {
                        st = Tag::SelfClosing;
                    } else if c == b'>' {
                        end = true;
                    } else {
                        // Read again in the before-attribute-name state.
                        st = Tag::BeforeAttr;
                        continue;
                    }
                }
            }
            #[cfg(test)]
            {
                if new_attr {
                    attr_start = j;
                } else if was == Tag::AttrName && (st != Tag::AttrName || end) {
                    names.push(self.text[attr_start..j].to_ascii_lowercase());
                }
            }
            if new_attr {
                if attrs == 0
                    && !end_tag
                    && FORMATTING
                        .iter()
                        .any(|f| f.eq_ignore_ascii_case(&self.text[name_start..name_end]))
                {
                    cap = cap.min(MAX_FORMATTING_ATTRS);
                }
                attrs += 1;
                if attrs > cap && !dropping {
                    self.copy_to(j);
                    dropping = true;
                }
            }
            if end {
                if dropping {
                    self.mark = j;
                    self.dropped += attrs - cap;
                }
                #[cfg(test)]
                {
                    names.sort();
                    names.dedup();
                    let name = self.text[name_start..name_end].to_ascii_lowercase();
                    self.tags.push((end_tag, name, names));
                }
                #[cfg(not(test))]
                let _ = (name_start, end_tag);
                return (j + 1, name_end);
            }
            j += 1;
        }
        if dropping {
            self.mark = b.len();
            self.dropped += attrs - cap;
        }
        (b.len(), name_end)
    }

    /// Where `</name` followed by whitespace, `/` or `>` begins at `p` (the tag's name
    /// ends at the returned position), as the raw text states find an end tag.
    fn end_tag_at(&self, p: usize, name: &str) -> Option<usize> {
        let b = self.text.as_bytes();
        let n = p + 2 + name.len();
        (b.get(p..p + 2) == Some(b"</")
            && b.get(p + 2..n)
                .is_some_and(|s| s.eq_ignore_ascii_case(name.as_bytes()))
            && b.get(n).is_some_and(|&c| ws(c) || c == b'/' || c == b'>'))
        .then_some(n)
    }

    /// RCDATA or raw text after the start tag `name` (lower case), from `from`: it ends at
    /// that tag's end tag. The position after the end tag.
    fn raw(&mut self, from: usize, name: &str) -> usize {
        let mut i = from;
        while let Some(k) = self.text[i..].find("</") {
            let p = i + k;
            self.maybe_feed(p);
            if let Some(n) = self.end_tag_at(p, name) {
                return self.tag(p + 2, n, true).0;
            }
            i = p + 1;
        }
        self.text.len()
    }

    /// Script data after a `<script>` start tag: it ends at `</script`, unless inside a
    /// `<!--<script>` double escape. The position after the end tag.
    fn script(&mut self, from: usize) -> usize {
        let b = self.text.as_bytes();
        let letters_end = |k: usize| {
            let mut e = k;
            while e < b.len() && b[e].is_ascii_alphabetic() {
                e += 1;
            }
            e
        };
        let is_script = |s: &[u8]| s.eq_ignore_ascii_case(b"script");
        let mut st = Script::Data;
        let mut j = from;
        while j < b.len() {
            let c = b[j];
            match st {
                Script::Data => match self.text[j..].find('<') {
                    Some(k) => {
                        j += k;
                        self.maybe_feed(j);
                        st = Script::LessThan;
                    }
                    None => return b.len(),
                },
                Script::LessThan | Script::EscapedLessThan(ScriptEscapeKind::Escaped)
                    if c == b'/' =>
                {
                    // An end tag opens here; only `</script` ends the script.
                    let e = letters_end(j + 1);
                    if e > j + 1
                        && is_script(&b[j + 1..e])
                        && b.get(e).is_some_and(|&c| ws(c) || c == b'/' || c == b'>')
                    {
                        return self.tag(j + 1, e, true).0;
                    }
                    st = if st == Script::LessThan {
                        Script::Data
                    } else {
                        Script::Escaped(ScriptEscapeKind::Escaped)
                    };
                    j = e;
                    continue;
                }
                Script::LessThan => {
                    if c == b'!' {
                        st = Script::EscapeStart;
                    } else {
                        st = Script::Data;
                        continue;
                    }
                }
                Script::EscapeStart | Script::EscapeStartDash => {
                    if c == b'-' {
                        st = if st == Script::EscapeStart {
                            Script::EscapeStartDash
                        } else {
                            Script::DashDash(ScriptEscapeKind::Escaped)
                        };
                    } else {
                        st = Script::Data;
                        continue;
                    }
                }
                Script::Escaped(k) => {
                    if c == b'-' {
                        st = Script::Dash(k);
                    } else if c == b'<' {
                        st = Script::EscapedLessThan(k);
                    }
                }
                Script::Dash(k) | Script::DashDash(k) => {
                    if c == b'-' {
                        st = Script::DashDash(k);
                    } else if c == b'<' {
                        st = Script::EscapedLessThan(k);
                    } else if c == b'>' && matches!(st, Script::DashDash(_)) {
                        st = Script::Data;
                    } else {
                        st = Script::Escaped(k);
                    }
                }
                Script::EscapedLessThan(ScriptEscapeKind::Escaped) => {
                    // `<script` followed by whitespace, `/` or `>` enters the double escape.
                    if c.is_ascii_alphabetic() {
                        let e = letters_end(j);
                        match b.get(e) {
                            Some(&d) if ws(d) || d == b'/' || d == b'>' => {
                                st = Script::Escaped(if is_script(&b[j..e]) {
                                    ScriptEscapeKind::DoubleEscaped
                                } else {
                                    ScriptEscapeKind::Escaped
                                });
                                j = e + 1;
                            }
                            _ => {
                                st = Script::Escaped(ScriptEscapeKind::Escaped);
                                j = e;
                            }
                        }
                        continue;
                    }
                    st = Script::Escaped(ScriptEscapeKind::Escaped);
                    continue;
                }
                Script::EscapedLessThan(ScriptEscapeKind::DoubleEscaped) => {
                    // `</script` followed by whitespace, `/` or `>` leaves the double escape.
                    if c == b'/' {
                        let e = letters_end(j + 1);
                        match b.get(e) {
                            Some(&d) if ws(d) || d == b'/' || d == b'>' => {
                                st = Script::Escaped(if is_script(&b[j + 1..e]) {
                                    ScriptEscapeKind::Escaped
                                } else {
                                    ScriptEscapeKind::DoubleEscaped
                                });
                                j = e + 1;
                            }
                            _ => {
                                st = Script::Escaped(ScriptEscapeKind::DoubleEscaped);
                                j = e;
                            }
                        }
                        continue;
                    }
                    st = Script::Escaped(ScriptEscapeKind::DoubleEscaped);
                    continue;
                }
            }
            j += 1;
        }
        b.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use html5ever::tendril::TendrilSink;
    use html5ever::{ParseOpts, parse_document, serialize};
    use markup5ever_rcdom::{Handle, NodeData, RcDom, SerializableHandle};

    fn opts() -> TreeBuilderOpts {
        TreeBuilderOpts {
            scripting_enabled: true,
            ..Default::default()
        }
    }

    fn ours(page: &str, cap: usize) -> (RcDom, usize) {
        parse(page, RcDom::default(), opts(), cap, &|| {})
    }

    fn html5ever_alone(page: &str) -> RcDom {
        let o = ParseOpts {
            tree_builder: opts(),
            ..Default::default()
        };
        parse_document(RcDom::default(), o).one(page)
    }

    fn html(dom: &RcDom) -> String {
        let mut out = Vec::new();
        let doc: SerializableHandle = dom.document.clone().into();
        serialize(&mut out, &doc, Default::default()).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// The most attributes on one element, `<html>` and `<body>` left out (a repeated
    /// start tag of those adds its attributes to the first one's).
    fn most_attrs(dom: &RcDom) -> usize {
        let mut most = 0;
        let mut stack: Vec<Handle> = vec![dom.document.clone()];
        while let Some(n) = stack.pop() {
            if let NodeData::Element {
                name,
                attrs,
                template_contents,
                ..
            } = &n.data
            {
                if !matches!(&*name.local, "html" | "body") {
                    most = most.max(attrs.borrow().len());
                }
                if let Some(t) = template_contents.borrow().as_ref() {
                    stack.push(t.clone());
                }
            }
            stack.extend(n.children.borrow().iter().cloned());
        }
        most
    }

    /// Pages whose tags begin and end where only the tokenizer's less common states say:
    /// parsed through the pass, each gives exactly html5ever's own tree.
    #[test]
    fn pages_parse_as_html5ever_parses_them() {
        let pages = [
            r#"<!DOCTYPE html><p a="x>y" b='q"r' c=d>text</p>"#,
            "<script>if (a<b) { x = \"<p c d e>\" }</script><p>after</p>",
            "<script><!--<script>x</script>y</script>z<p q r>",
            "<script><!-- a --> <p x y></script><b>b</b>",
            "<style>p > a { } </styles> </style ><i>i</i>",
            "<title>a <b c d> e</title x=1><textarea><p></textarea>",
            "<!-- a <p b c> --!> <p d e>",
            "<!--> <p f g> <!---> <p h i> <!-- -- --->",
            "<!---><p a b><!--><p c d><!----><p e f><!-- --!><p g h>",
            "<script><!--<script></script><p a b></script><p c d>",
            "<script><!--<scripts></script><p a b>",
            "<script><!--<script>--></script><p a b>",
            "<svg><style><p j k></style><![CDATA[ <p l m> ]]></svg><![CDATA[ <p n o> ]]>",
            "<math><mi><![CDATA[x]]></mi></math><?php <p s t> ?>",
            "</ p u v><//><p>w</p>",
            "<noscript><p x></noscript><xmp><p y></xmp><iframe><p z></iframe>",
            "<p a/b/c/d><p a=\"1\"b=2 c>",
            "<table><tr><td a b>1<select><option c>2<textarea>t</textarea></select></table>",
            "<frameset><noframes><p a></noframes></frameset>",
            "<template><p q r></template><plaintext><p s t></p>",
        ];
        for page in pages {
            let (dom, dropped) = ours(page, MAX_ATTRS);
            let (pass, tokenizer) = LAST_TAGS.with(|t| t.take());
            assert_eq!(pass, tokenizer, "{page}");
            assert_eq!(dropped, 0, "{page}");
            assert_eq!(html(&dom), html(&html5ever_alone(page)), "{page}");
        }
    }

    /// Random pages made of pieces that switch the tokenizer between its states: with a cap
    /// of two, no element ever gets more than two attributes, so no piece of markup hides a
    /// tag's attributes from the pass (a desync would let them through uncounted); and with
    /// a cap they never reach, the tree is html5ever's own.
    #[test]
    fn no_state_hides_a_tags_attributes_from_the_cap() {
        const PIECES: &[&str] = &[
            "<p a b c d e>",
            "<b x=1 y='2' z=\"3\" w>",
            "<i q/r/s t u>",
            "<u v=\"a>b\" w='c\"d' x=e y>",
            "</p a b c>",
            "<svg k l m>",
            "</svg>",
            "<math>",
            "<foreignObject>",
            "\"",
            "'",
            "=",
            " ",
            ">",
            "/",
            "<",
            "</",
            "<!--",
            "-->",
            "--!>",
            "<!-->",
            "-",
            "!",
            "<!",
            "<script>",
            "</script>",
            "<SCRIPT a>",
            "</script ",
            "<!--<script>",
            "<style>",
            "</style>",
            "<textarea>",
            "</textarea>",
            "<title>",
            "</title>",
            "<noscript>",
            "</noscript>",
            "<xmp>",
            "</xmp>",
            "<iframe>",
            "</iframe>",
            "<![CDATA[",
            "]]>",
            "<!DOCTYPE html>",
            "<?x ",
            "<table>",
            "<select>",
            "<template>",
            "</template>",
            "text ",
            "\n",
            "&amp;",
            "<noframes>",
            "</noframes>",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as usize) % n
        };
        for round in 0..3000 {
            let len = 5 + next(40);
            let mut page = String::new();
            for _ in 0..len {
                page.push_str(PIECES[next(PIECES.len())]);
            }
            let (dom, _) = ours(&page, 2);
            assert!(most_attrs(&dom) <= 2, "round {round}: {page:?}");
            let (dom, dropped) = ours(&page, 1000);
            assert_eq!(dropped, 0);
            assert_eq!(html(&dom), html(&html5ever_alone(&page)), "round {round}");
            // Tag for tag, the pass saw what the tokenizer emitted.
            let (pass, tokenizer) = LAST_TAGS.with(|t| t.take());
            assert_eq!(pass, tokenizer, "round {round}: {page:?}");
        }
    }

    /// One element with 200 000 distinct attributes: the tokenizer is given the first
    /// [`MAX_ATTRS`], so the parse takes milliseconds where it took 24 s.
    #[test]
    fn an_attribute_bomb_is_capped_before_the_tokenizer() {
        let attrs: String = (0..200_000).map(|i| format!(" a{i}")).collect();
        let page = format!("<p{attrs}>kept</p><p b c>after</p>");
        let t = std::time::Instant::now();
        let (dom, dropped) = ours(&page, MAX_ATTRS);
        assert!(
            t.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(dropped, 200_000 - MAX_ATTRS);
        assert_eq!(most_attrs(&dom), MAX_ATTRS);
        let out = html(&dom);
        assert!(
            out.contains(" a255=\"\">kept</p><p b=\"\" c=\"\">after"),
            "{}",
            &out[out.len() - 200..]
        );
        assert!(!out.contains(" a256"));
    }

    /// A formatting element's start tag keeps fewer attributes than other tags; its end
    /// tag, which the tree builder does not compare, the usual number.
    #[test]
    fn formatting_elements_keep_fewer_attributes() {
        let attrs: String = (0..100).map(|i| format!(" a{i}")).collect();
        let page = format!("<B{attrs}>x</b{attrs}><div{attrs}>y</div>");
        let (dom, dropped) = ours(&page, MAX_ATTRS);
        assert_eq!(dropped, 100 - MAX_FORMATTING_ATTRS);
        let out = html(&dom);
        assert!(out.contains(" a31=\"\">x</b>"), "{out}");
        assert!(out.contains(" a99=\"\">y</div>"), "{out}");
    }

    /// The time is checked between pieces even where the page makes no node at all (one
    /// long comment), and a check that unwinds stops the parse there.
    #[test]
    fn the_check_runs_between_pieces() {
        let page = format!("<!--{}-->", "x".repeat(1 << 20));
        let checks = Cell::new(0usize);
        let _ = parse(&page, RcDom::default(), opts(), MAX_ATTRS, &|| {
            checks.set(checks.get() + 1)
        });
        assert!(checks.get() >= (1 << 20) / PIECE, "{} checks", checks.get());
        let fed = Cell::new(0usize);
        let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            parse(&page, RcDom::default(), opts(), MAX_ATTRS, &|| {
                fed.set(fed.get() + 1);
                if fed.get() == 2 {
                    std::panic::resume_unwind(Box::new("stop"));
                }
            })
        }));
        assert!(stopped.is_err());
        assert_eq!(fed.get(), 2, "the parse stopped at the check that said so");
    }
}
