//! Log files read line by line, streamed (one line in memory at a time), gzip-compressed or not
//! (told by the file's first two bytes, not its name), each line read into a [`Record`] by its
//! format. Lines that cannot be read are counted, and the first few kept with their file and line
//! number; they never stop the run.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;
use serde::Serialize;

use crate::log::{Format, JsonFields, Record};

/// How many malformed lines are kept, with their place and reason, for the report.
pub const KEPT_MALFORMED: usize = 20;

/// How many non-empty lines at the start of a file are tried to tell its format.
const DETECT_LINES: usize = 100;

/// The largest line read; longer ones are malformed (a log is not one huge line).
const MAX_LINE: usize = 64 << 10;

/// The `--format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum FormatName {
    /// nginx/Apache `combined`, optionally followed by `"$http_x_forwarded_for"`.
    Combined,
    /// Envoy's default access-log format.
    Envoy,
    /// One JSON object per line (fields named by `--json-field`).
    Jsonl,
}

impl FormatName {
    /// The format, with `fields` for JSON lines.
    pub fn format(self, fields: &JsonFields) -> Format {
        match self {
            FormatName::Combined => Format::Combined,
            FormatName::Envoy => Format::Envoy,
            FormatName::Jsonl => Format::JsonLines(fields.clone()),
        }
    }
}

/// The name of `format` as `--format` spells it.
pub fn format_name(format: &Format) -> &'static str {
    match format {
        Format::Combined => "combined",
        Format::Envoy => "envoy",
        Format::JsonLines(_) => "jsonl",
    }
}

/// A line that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Malformed {
    /// The file.
    pub file: String,
    /// Its 1-based line number.
    pub line: u64,
    /// Why.
    pub reason: String,
}

/// What reading the logs came to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Reading {
    /// Lines read (empty lines excluded).
    pub lines: u64,
    /// Lines that could not be read.
    pub malformed: u64,
    /// The first [`KEPT_MALFORMED`] of them.
    pub examples: Vec<Malformed>,
    /// The format of each file, as detected or given.
    pub formats: Vec<(String, &'static str)>,
}

impl Reading {
    fn malformed(&mut self, file: &Path, line: u64, reason: String) {
        self.malformed += 1;
        if self.examples.len() < KEPT_MALFORMED {
            self.examples.push(Malformed { file: file.display().to_string(), line, reason });
        }
    }
}

/// Why the logs could not be read at all (as opposed to a malformed line).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A file could not be opened or read.
    #[error("{file}: {source}")]
    Io {
        /// The file.
        file: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// No format reads the file's first lines, or several do.
    #[error("{file}: {why}; give --format combined|envoy|jsonl")]
    Format {
        /// The file.
        file: PathBuf,
        /// What was found.
        why: String,
    },
}

/// Opens `path`, decompressing it when it starts with gzip's magic bytes.
pub fn open(path: &Path) -> Result<Box<dyn BufRead>, SourceError> {
    let io = |source| SourceError::Io { file: path.to_path_buf(), source };
    let mut file = BufReader::with_capacity(256 << 10, File::open(path).map_err(io)?);
    let gzip = file.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
    Ok(if gzip {
        Box::new(BufReader::with_capacity(256 << 10, MultiGzDecoder::new(file)))
    } else {
        Box::new(file)
    })
}

/// Reads one line into `buf` (cleared first, without its line break): `Ok(false)` at the end.
/// A line longer than [`MAX_LINE`] is cut there (the rest skipped) and reported too long.
fn read_line(reader: &mut dyn BufRead, buf: &mut Vec<u8>, too_long: &mut bool) -> io::Result<bool> {
    buf.clear();
    *too_long = false;
    let n = Read::take(&mut *reader, MAX_LINE as u64 + 1).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(false);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    } else if buf.len() > MAX_LINE {
        *too_long = true;
        // Skip the rest of the line.
        let mut rest = Vec::new();
        loop {
            rest.clear();
            let m = Read::take(&mut *reader, MAX_LINE as u64).read_until(b'\n', &mut rest)?;
            if m == 0 || rest.last() == Some(&b'\n') {
                break;
            }
        }
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(true)
}

/// The format of `path`, from its first lines: the one format that reads the first line any
/// format reads.
pub fn detect(path: &Path, fields: &JsonFields) -> Result<Format, SourceError> {
    let mut reader = open(path)?;
    let mut buf = Vec::new();
    let mut too_long = false;
    let mut tried = 0;
    let io = |source| SourceError::Io { file: path.to_path_buf(), source };
    while tried < DETECT_LINES && read_line(&mut *reader, &mut buf, &mut too_long).map_err(io)? {
        let Ok(line) = std::str::from_utf8(&buf) else { continue };
        if line.trim().is_empty() || too_long {
            continue;
        }
        tried += 1;
        let readers: Vec<Format> = [Format::Combined, Format::Envoy, Format::JsonLines(fields.clone())]
            .into_iter()
            .filter(|f| f.parse(line).is_ok())
            .collect();
        match readers.len() {
            0 => continue,
            1 => return Ok(readers.into_iter().next().unwrap_or(Format::Combined)),
            _ => {
                let names: Vec<_> = readers.iter().map(format_name).collect();
                return Err(SourceError::Format {
                    file: path.to_path_buf(),
                    why: format!("its lines read as {}", names.join(" and ")),
                });
            }
        }
    }
    let why = if tried == 0 {
        "no lines to read".to_owned()
    } else {
        format!("none of its first {tried} lines is combined, envoy or JSON lines")
    };
    Err(SourceError::Format { file: path.to_path_buf(), why })
}

/// Reads every line of `paths` in order, calling `each` with every record (its file index and
/// line number beside it); lines that cannot be read are counted in the returned [`Reading`].
/// `format` applies to every file; without it, each file's format is detected.
pub fn read_all(
    paths: &[PathBuf],
    format: Option<&Format>,
    fields: &JsonFields,
    mut each: impl FnMut(&Record),
) -> Result<Reading, SourceError> {
    let mut reading = Reading::default();
    let mut buf = Vec::with_capacity(1024);
    for path in paths {
        let format = match format {
            Some(f) => f.clone(),
            None => detect(path, fields)?,
        };
        reading.formats.push((path.display().to_string(), format_name(&format)));
        let mut reader = open(path)?;
        let io = |source| SourceError::Io { file: path.to_path_buf(), source };
        let mut number = 0u64;
        let mut too_long = false;
        while read_line(&mut *reader, &mut buf, &mut too_long).map_err(io)? {
            number += 1;
            if too_long {
                reading.lines += 1;
                reading.malformed(path, number, format!("longer than {MAX_LINE} bytes"));
                continue;
            }
            let Ok(line) = std::str::from_utf8(&buf) else {
                reading.lines += 1;
                reading.malformed(path, number, "not UTF-8".into());
                continue;
            };
            if line.trim().is_empty() {
                continue;
            }
            reading.lines += 1;
            match format.parse(line) {
                Ok(record) => each(&record),
                Err(e) => reading.malformed(path, number, e.0),
            }
        }
    }
    Ok(reading)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    const NGINX: &[&str] = &[
        r#"203.0.113.5 - - [02/Dec/2026:09:00:00 +0000] "GET /api/orders/17 HTTP/1.1" 200 512 "-" "Mozilla/5.0 (X11; Linux x86_64)""#,
        r#"203.0.113.6 - - [02/Dec/2026:09:00:00 +0000] "POST /api/orders HTTP/1.1" 201 88 "https://shop.example/cart" "Mozilla/5.0""#,
        r#"this is not a log line"#,
        "",
        r#"198.51.100.2 - alice [02/Dec/2026:09:00:01 +0000] "GET /static/app.js HTTP/2.0" 304 0 "-" "curl/8.5.0""#,
    ];

    fn write(name: &str, bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("floodgate-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn gzip(text: &str) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(text.as_bytes()).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_plain_and_a_gzip_log_read_alike_with_malformed_lines_numbered() {
        let text = NGINX.join("\n") + "\n";
        let plain = write("plain.log", text.as_bytes());
        let packed = write("packed.log.gz", &gzip(&text));
        for path in [plain, packed] {
            let mut paths = Vec::new();
            let reading = read_all(std::slice::from_ref(&path), None, &JsonFields::default(), |r| {
                paths.push(r.path.to_string())
            })
            .unwrap();
            assert_eq!(paths, ["/api/orders/17", "/api/orders", "/static/app.js"]);
            assert_eq!((reading.lines, reading.malformed), (4, 1));
            assert_eq!(reading.examples[0].line, 3, "{:?}", reading.examples);
            assert!(reading.examples[0].reason.contains("time"), "{:?}", reading.examples);
            assert_eq!(reading.formats[0].1, "combined");
        }
    }

    #[test]
    fn crlf_endings_a_missing_final_newline_and_bad_bytes_are_handled() {
        let mut bytes = NGINX[0].as_bytes().to_vec();
        bytes.extend_from_slice(b"\r\n\xff\xfe garbage\r\n");
        bytes.extend_from_slice(NGINX[1].as_bytes());
        let path = write("crlf.log", &bytes);
        let mut n = 0;
        let reading = read_all(&[path], Some(&Format::Combined), &JsonFields::default(), |_| n += 1).unwrap();
        assert_eq!((n, reading.lines, reading.malformed), (2, 3, 1));
        assert_eq!(reading.examples[0].reason, "not UTF-8");
        assert_eq!(reading.examples[0].line, 2);
    }

    #[test]
    fn an_overlong_line_is_malformed_and_the_next_line_still_read() {
        let mut text = "x".repeat(MAX_LINE * 2 + 10);
        text.push('\n');
        text.push_str(NGINX[0]);
        let path = write("long.log", text.as_bytes());
        let mut n = 0;
        let reading = read_all(&[path], Some(&Format::Combined), &JsonFields::default(), |_| n += 1).unwrap();
        assert_eq!((n, reading.malformed), (1, 1));
        assert!(reading.examples[0].reason.contains("longer than"));
    }

    #[test]
    fn each_file_gets_its_own_detected_format() {
        let envoy = write(
            "envoy.log",
            br#"[2026-12-02T09:00:00.120Z] "GET /api/orders/3 HTTP/1.1" 200 - 0 312 4 3 "198.51.100.7" "okhttp/4.12" "5b1f0c8e-3f1d-4c55-9b8a-1c2d3e4f5a6b" "shop.example" "10.1.2.3:8080"
"#,
        );
        let json = write(
            "app.jsonl",
            br#"{"time":"2026-12-02T09:00:00Z","remote_addr":"192.0.2.4","method":"GET","path":"/","status":200}
"#,
        );
        let nginx = write("nginx.log", (NGINX[0].to_owned() + "\n").as_bytes());
        let reading = read_all(&[envoy, json, nginx], None, &JsonFields::default(), |_| {}).unwrap();
        let formats: Vec<_> = reading.formats.iter().map(|f| f.1).collect();
        assert_eq!(formats, ["envoy", "jsonl", "combined"]);
    }

    #[test]
    fn a_file_no_format_reads_asks_for_format() {
        let path = write("junk.log", b"hello\nworld\n");
        let e = read_all(&[path], None, &JsonFields::default(), |_| {}).unwrap_err();
        assert!(e.to_string().contains("give --format"), "{e}");
        let missing = read_all(&[PathBuf::from("/nonexistent/x.log")], None, &JsonFields::default(), |_| {});
        assert!(matches!(missing, Err(SourceError::Io { .. })));
    }
}
