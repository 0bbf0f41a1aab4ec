//! The soak's plot: one small panel per sampled series, drawn into a palette bitmap and
//! written as a PNG with stored (uncompressed) deflate blocks.
//!
//! Hand-rolled rather than a plotting crate because all it needs is lines, rectangles and a
//! few upper-case labels: a 3×5 pixel font is embedded below, so there is no system font to
//! find, and the PNG encoder is a CRC and an Adler checksum. Nothing is added to the build.

use std::io::Write;

/// One series to draw: its label (upper-case letters, digits, ` .%-/:`), its values, and
/// its baseline (drawn as a horizontal line) if it has one.
pub struct Series<'a> {
    /// Shown above the panel.
    pub label: &'a str,
    /// One value per sample.
    pub values: Vec<f64>,
    /// The value the series must come back to.
    pub baseline: Option<f64>,
}

const WHITE: u8 = 0;
const BLACK: u8 = 1;
const SHADE: u8 = 2;
const BLUE: u8 = 3;
const GREEN: u8 = 4;
const GREY: u8 = 5;
const PALETTE: [[u8; 3]; 6] = [
    [255, 255, 255],
    [0, 0, 0],
    [232, 236, 244],
    [30, 80, 200],
    [20, 150, 60],
    [150, 150, 150],
];

const PANEL_W: usize = 460;
const PANEL_H: usize = 210;
const COLS: usize = 2;
const SCALE: usize = 2;

/// An indexed-colour canvas.
struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    fn new(w: usize, h: usize) -> Self {
        Self {
            w,
            h,
            px: vec![WHITE; w * h],
        }
    }

    fn set(&mut self, x: i64, y: i64, c: u8) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            self.px[y as usize * self.w + x as usize] = c;
        }
    }

    fn rect(&mut self, x0: usize, y0: usize, x1: usize, y1: usize, c: u8) {
        for y in y0..y1 {
            for x in x0..x1 {
                self.set(x as i64, y as i64, c);
            }
        }
    }

    fn frame(&mut self, x0: usize, y0: usize, x1: usize, y1: usize, c: u8) {
        for x in x0..=x1 {
            self.set(x as i64, y0 as i64, c);
            self.set(x as i64, y1 as i64, c);
        }
        for y in y0..=y1 {
            self.set(x0 as i64, y as i64, c);
            self.set(x1 as i64, y as i64, c);
        }
    }

    /// A two-pixel-wide line (Bresenham, doubled downwards).
    fn line(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), c: u8) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        loop {
            self.set(x, y, c);
            self.set(x, y + 1, c);
            if x == x1 && y == y1 {
                return;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    fn text(&mut self, x: usize, y: usize, s: &str, c: u8) {
        for (i, ch) in s.chars().enumerate() {
            let g = glyph(ch);
            for row in 0..5 {
                for col in 0..3 {
                    if g >> (14 - (row * 3 + col)) & 1 == 1 {
                        let (px, py) = (x + i * 4 * SCALE + col * SCALE, y + row * SCALE);
                        self.rect(px, py, px + SCALE, py + SCALE, c);
                    }
                }
            }
        }
    }
}

/// The 3×5 glyph of `c`, rows top to bottom, three bits each (left bit first); anything
/// outside the small alphabet is a blank.
fn glyph(c: char) -> u16 {
    let rows: [u8; 5] = match c.to_ascii_uppercase() {
        '0' => [7, 5, 5, 5, 7],
        '1' => [2, 6, 2, 2, 7],
        '2' => [7, 1, 7, 4, 7],
        '3' => [7, 1, 7, 1, 7],
        '4' => [5, 5, 7, 1, 1],
        '5' => [7, 4, 7, 1, 7],
        '6' => [7, 4, 7, 5, 7],
        '7' => [7, 1, 1, 1, 1],
        '8' => [7, 5, 7, 5, 7],
        '9' => [7, 5, 7, 1, 7],
        'A' => [2, 5, 7, 5, 5],
        'B' => [6, 5, 6, 5, 6],
        'C' => [3, 4, 4, 4, 3],
        'D' => [6, 5, 5, 5, 6],
        'E' => [7, 4, 6, 4, 7],
        'F' => [7, 4, 6, 4, 4],
        'G' => [3, 4, 5, 5, 3],
        'H' => [5, 5, 7, 5, 5],
        'I' => [7, 2, 2, 2, 7],
        'J' => [1, 1, 1, 5, 2],
        'K' => [5, 5, 6, 5, 5],
        'L' => [4, 4, 4, 4, 7],
        'M' => [5, 7, 7, 5, 5],
        'N' => [6, 5, 5, 5, 5],
        'O' => [2, 5, 5, 5, 2],
        'P' => [6, 5, 6, 4, 4],
        'Q' => [2, 5, 5, 6, 3],
        'R' => [6, 5, 6, 5, 5],
        'S' => [3, 4, 2, 1, 6],
        'T' => [7, 2, 2, 2, 2],
        'U' => [5, 5, 5, 5, 7],
        'V' => [5, 5, 5, 5, 2],
        'W' => [5, 5, 7, 7, 5],
        'X' => [5, 5, 2, 5, 5],
        'Y' => [5, 5, 2, 2, 2],
        'Z' => [7, 1, 2, 4, 7],
        '.' => [0, 0, 0, 0, 2],
        '%' => [5, 1, 2, 4, 5],
        '-' => [0, 0, 7, 0, 0],
        '/' => [1, 1, 2, 4, 4],
        ':' => [0, 2, 0, 2, 0],
        _ => [0; 5],
    };
    rows.iter().fold(0, |acc, r| (acc << 3) | u16::from(*r))
}

/// A value as the panel labels show it: integers plainly, others with one decimal.
fn short(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Draws every series against the sample times `t` (seconds), with the churn between
/// `churn.0` and `churn.1` shaded, and writes the PNG to `path`.
pub fn draw(
    path: &std::path::Path,
    t: &[f64],
    churn: (f64, f64),
    series: &[Series],
) -> Result<(), String> {
    let rows = series.len().div_ceil(COLS);
    let mut cv = Canvas::new(PANEL_W * COLS, PANEL_H * rows);
    let t_max = t.iter().copied().fold(1.0, f64::max);
    for (i, s) in series.iter().enumerate() {
        let (ox, oy) = ((i % COLS) * PANEL_W, (i / COLS) * PANEL_H);
        // The plot area inside the panel, leaving room for the labels.
        let (x0, y0, x1, y1) = (ox + 14, oy + 26, ox + PANEL_W - 14, oy + PANEL_H - 24);
        let top = s
            .values
            .iter()
            .copied()
            .chain(s.baseline)
            .fold(0.0, f64::max)
            .max(1.0)
            * 1.1;
        let px = |tv: f64| x0 as f64 + (tv / t_max) * (x1 - x0) as f64;
        let py = |v: f64| y1 as f64 - (v / top) * (y1 - y0) as f64;
        cv.rect(px(churn.0) as usize, y0, px(churn.1) as usize, y1, SHADE);
        cv.frame(x0, y0, x1, y1, BLACK);
        if let Some(b) = s.baseline {
            let y = py(b) as i64;
            for x in (x0 as i64..x1 as i64).step_by(8) {
                cv.line((x, y), ((x + 4).min(x1 as i64), y), GREEN);
            }
        }
        let pts: Vec<(i64, i64)> = t
            .iter()
            .zip(&s.values)
            .map(|(&tv, &v)| (px(tv) as i64, py(v) as i64))
            .collect();
        for w in pts.windows(2) {
            cv.line(w[0], w[1], BLUE);
        }
        for &(x, y) in &pts {
            cv.rect(
                (x - 2).max(0) as usize,
                (y - 2).max(0) as usize,
                (x + 3) as usize,
                (y + 3) as usize,
                BLUE,
            );
        }
        let max = s.values.iter().copied().fold(0.0, f64::max);
        cv.text(x0, oy + 8, s.label, BLACK);
        let right = format!("MAX {}", short(max));
        cv.text(x1 - right.len() * 4 * SCALE, oy + 8, &right, GREY);
        cv.text(x0, y1 + 6, "0S", GREY);
        let end = format!("{}S", short(t_max.round()));
        cv.text(x1 - end.len() * 4 * SCALE, y1 + 6, &end, GREY);
    }
    let png = encode(&cv);
    let mut f = std::fs::File::create(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    f.write_all(&png)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn encode(cv: &Canvas) -> Vec<u8> {
    let mut raw = Vec::with_capacity((cv.w + 1) * cv.h);
    for row in cv.px.chunks(cv.w) {
        raw.push(0); // filter: none
        raw.extend_from_slice(row);
    }
    let mut z = vec![0x78, 0x01];
    let mut blocks = raw.chunks(65_535).peekable();
    while let Some(b) = blocks.next() {
        z.push(u8::from(blocks.peek().is_none()));
        let n = b.len() as u16;
        z.extend_from_slice(&n.to_le_bytes());
        z.extend_from_slice(&(!n).to_le_bytes());
        z.extend_from_slice(b);
    }
    z.extend_from_slice(&adler32(&raw).to_be_bytes());
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&(cv.w as u32).to_be_bytes());
    ihdr.extend_from_slice(&(cv.h as u32).to_be_bytes());
    ihdr.extend_from_slice(&[8, 3, 0, 0, 0]); // 8-bit indexed colour
    let plte: Vec<u8> = PALETTE.iter().flatten().copied().collect();
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"PLTE", &plte);
    chunk(&mut out, b"IDAT", &z);
    chunk(&mut out, b"IEND", &[]);
    out
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + u32::from(x)) % 65_521;
        b = (b + a) % 65_521;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_match_known_values() {
        // The check values of the two algorithms (RFC 1950 / the PNG specification's CRC).
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    }

    #[test]
    fn a_plot_is_a_png_with_the_panels_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.png");
        let s = |label| Series {
            label,
            values: vec![1.0, 3.0, 2.0],
            baseline: Some(1.0),
        };
        draw(
            &path,
            &[0.0, 10.0, 20.0],
            (5.0, 15.0),
            &[s("A"), s("B"), s("C")],
        )
        .expect("draw");
        let png = std::fs::read(&path).expect("read");
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&png[12..16], b"IHDR");
        let w = u32::from_be_bytes(png[16..20].try_into().expect("4 bytes"));
        let h = u32::from_be_bytes(png[20..24].try_into().expect("4 bytes"));
        assert_eq!((w, h), ((PANEL_W * 2) as u32, (PANEL_H * 2) as u32));
    }
}
