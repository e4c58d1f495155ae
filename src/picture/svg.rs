//! A small SVG writer: the elements the pictures use, every text escaped.

use std::fmt::Write;

/// `s` safe inside SVG text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Characters XML 1.0 does not allow (control characters but tab and newline).
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// How wide a character of the pictures' monospace font is, in ems, at most: DejaVu Sans Mono
/// and Menlo advance 0.602 em (regular and bold), Consolas 0.55, Liberation Mono and Courier 0.6.
/// Text widths are estimated with this, so an estimate is never short of the rendered text.
pub const CHAR_EM: f64 = 0.62;

/// The estimated width in pixels of `text` at font size `size` ([`CHAR_EM`] per character).
pub fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * CHAR_EM * size
}

/// An SVG document (or a part of one) being written.
#[derive(Debug, Default)]
pub struct Svg {
    out: String,
    /// The rightmost x any element reaches (texts by [`text_width`]).
    right: f64,
    /// A class for the next element (see [`Svg::class`]).
    class: Option<String>,
}

impl Svg {
    /// An empty part, for [`Svg::append`].
    pub fn new() -> Self {
        Svg::default()
    }

    /// A document `width` x `height` pixels, white background, a sans-serif font.
    pub fn start(width: f64, height: f64) -> Self {
        let mut s = Svg::new();
        let _ = write!(
            s.out,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
             width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" \
             font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\">\n\
             <rect x=\"0\" y=\"0\" width=\"{width:.0}\" height=\"{height:.0}\" fill=\"#ffffff\"/>\n\
             <defs><marker id=\"arrow\" markerWidth=\"8\" markerHeight=\"8\" refX=\"7\" refY=\"4\" \
             orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 z\" fill=\"#666666\"/></marker></defs>\n"
        );
        s
    }

    /// Appends another part.
    pub fn append(&mut self, part: Svg) {
        self.out.push_str(&part.out);
        self.right = self.right.max(part.right);
    }

    /// The rightmost x the elements written so far reach (texts by their estimated width): a
    /// picture at least this wide (plus a margin) shows all of them.
    pub fn right(&self) -> f64 {
        self.right
    }

    /// Gives the next element `class="CLASS"`, so that tests (and style sheets) can find the
    /// picture's parts: `region-bar`, `region-fill`, `row-fill`, `range-fill`, `end-hop`.
    pub fn class(&mut self, class: &str) -> &mut Self {
        self.class = Some(class.to_string());
        self
    }

    /// The class attribute for the element being written, if [`Svg::class`] gave one.
    fn take_class(&mut self) -> String {
        self.class
            .take()
            .map_or(String::new(), |c| format!(" class=\"{}\"", escape(&c)))
    }

    /// A rectangle; `dash` is an SVG dash array for a dashed outline.
    #[allow(clippy::too_many_arguments)]
    pub fn rect(
        &mut self,
        x: f64,
        y: f64,
        w: f64,
        h: f64,
        fill: &str,
        stroke: &str,
        width: f64,
        dash: Option<&str>,
    ) {
        let dash = dash.map_or(String::new(), |d| format!(" stroke-dasharray=\"{}\"", escape(d)));
        let class = self.take_class();
        self.right = self.right.max(x + w);
        let _ = writeln!(
            self.out,
            "<rect{class} x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{}\" stroke=\"{}\" stroke-width=\"{width:.1}\"{dash}/>",
            escape(fill),
            escape(stroke)
        );
    }

    /// A straight line.
    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str, width: f64) {
        let class = self.take_class();
        self.right = self.right.max(x1).max(x2);
        let _ = writeln!(
            self.out,
            "<line{class} x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"{}\" stroke-width=\"{width:.1}\"/>",
            escape(stroke)
        );
    }

    /// An arrow leaving (x1, y1) rightwards to its lane at `lane`, along the lane to `y2`, and
    /// back left to (x2, y2): an END hop from a row to its target table's header.
    pub fn arrow(&mut self, x1: f64, y1: f64, lane: f64, y2: f64, x2: f64, stroke: &str) {
        let class = self.take_class();
        self.right = self.right.max(lane);
        let _ = writeln!(
            self.out,
            "<path{class} d=\"M{x1:.1},{y1:.1} L{lane:.1},{y1:.1} L{lane:.1},{y2:.1} L{x2:.1},{y2:.1}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" marker-end=\"url(#arrow)\"/>",
            escape(stroke)
        );
    }

    /// An arrow leaving (x, y1) leftwards to the margin at `margin`, along it to `y2`, and back
    /// right to (x, y2): the walk going from one row to a row that is not the next.
    pub fn walk_arrow(&mut self, x: f64, y1: f64, margin: f64, y2: f64, stroke: &str) {
        let class = self.take_class();
        self.right = self.right.max(x);
        let _ = writeln!(
            self.out,
            "<path{class} d=\"M{x:.1},{y1:.1} L{margin:.1},{y1:.1} L{margin:.1},{y2:.1} L{:.1},{y2:.1}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.2\" stroke-dasharray=\"2,2\" marker-end=\"url(#arrow)\"/>",
            x - 1.0,
            escape(stroke)
        );
    }

    /// A line of text with its baseline at `y`.
    pub fn text(&mut self, x: f64, y: f64, size: f64, weight: &str, fill: &str, text: &str) {
        let class = self.take_class();
        self.right = self.right.max(x + text_width(text, size));
        let _ = writeln!(
            self.out,
            "<text{class} x=\"{x:.1}\" y=\"{y:.1}\" font-size=\"{size:.0}\" font-weight=\"{}\" fill=\"{}\" xml:space=\"preserve\">{}</text>",
            escape(weight),
            escape(fill),
            escape(text)
        );
    }

    /// The finished document.
    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_attributes_are_escaped() {
        assert_eq!(
            escape("a<b & \"c\" 'd'>"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;"
        );
        assert_eq!(escape("bell\u{7}"), "bell?");
        let mut s = Svg::start(10.0, 10.0);
        s.text(1.0, 2.0, 3.0, "bold", "#000", "x < y");
        let doc = s.finish();
        assert!(doc.contains(">x &lt; y</text>"), "{doc}");
        assert!(doc.ends_with("</svg>\n"));
    }

    #[test]
    fn a_class_goes_to_the_next_element_only_and_right_follows_the_elements() {
        let mut s = Svg::new();
        s.class("a\"b")
            .rect(10.0, 0.0, 30.0, 5.0, "#fff", "#000", 1.0, None);
        s.rect(0.0, 0.0, 5.0, 5.0, "#fff", "#000", 1.0, None);
        assert_eq!(s.right(), 40.0);
        s.text(100.0, 10.0, 10.0, "normal", "#000", "abcde");
        assert!((s.right() - (100.0 + 5.0 * CHAR_EM * 10.0)).abs() < 1e-9);
        let doc = s.finish();
        assert_eq!(doc.matches("class=").count(), 1, "{doc}");
        assert!(doc.starts_with("<rect class=\"a&quot;b\" x=\"10.0\""), "{doc}");
    }
}
