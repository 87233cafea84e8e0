//! The `--format` mini-language of `rill consume`.
//!
//! Tokens: `%t` topic, `%p` partition, `%o` offset, `%k` key, `%v` value, `%T` timestamp (ms),
//! `%d` delivery count (share groups; empty otherwise),
//! `%%` a literal `%`; `\n` and `\t` are newline and tab. Anything else prints as written. A
//! null key or value prints as nothing (`--output json` tells null from empty).

/// One piece of a format.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Topic,
    Partition,
    Offset,
    Key,
    Value,
    Timestamp,
    DeliveryCount,
}

/// A parsed format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format(Vec<Piece>);

/// The fields a format can print.
pub struct Fields<'a> {
    pub topic: &'a str,
    pub partition: u32,
    pub offset: u64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub timestamp_ms: i64,
    /// How often a share group delivered the record (this time included); `None` outside one.
    pub delivery_count: Option<u16>,
}

impl Format {
    /// Parses `spec`; unknown `%x` tokens are refused so typos do not print silently wrong data.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut chars = spec.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '%' => {
                    let piece = match chars.next() {
                        Some('t') => Piece::Topic,
                        Some('p') => Piece::Partition,
                        Some('o') => Piece::Offset,
                        Some('k') => Piece::Key,
                        Some('v') => Piece::Value,
                        Some('T') => Piece::Timestamp,
                        Some('d') => Piece::DeliveryCount,
                        Some('%') => {
                            text.push('%');
                            continue;
                        }
                        Some(other) => {
                            return Err(format!("unknown format token %{other}; use %t %p %o %k %v %T %d or %%"))
                        }
                        None => return Err("format ends with a lone %".into()),
                    };
                    if !text.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut text)));
                    }
                    pieces.push(piece);
                }
                '\\' if matches!(chars.peek(), Some('n') | Some('t')) => {
                    text.push(if chars.next() == Some('n') { '\n' } else { '\t' });
                }
                c => text.push(c),
            }
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        Ok(Self(pieces))
    }

    /// Renders one record.
    pub fn render(&self, f: &Fields<'_>) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Topic => out.push_str(f.topic),
                Piece::Partition => out.push_str(&f.partition.to_string()),
                Piece::Offset => out.push_str(&f.offset.to_string()),
                Piece::Key => out.push_str(&String::from_utf8_lossy(f.key.unwrap_or_default())),
                Piece::Value => out.push_str(&String::from_utf8_lossy(f.value.unwrap_or_default())),
                Piece::Timestamp => out.push_str(&f.timestamp_ms.to_string()),
                Piece::DeliveryCount => {
                    if let Some(n) = f.delivery_count {
                        out.push_str(&n.to_string());
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_token() {
        let f = Format::parse("%t/%p@%o %k=%v (%T) #%d 100%%\\t.").unwrap();
        let s = f.render(&Fields {
            topic: "t",
            partition: 2,
            offset: 7,
            key: Some(b"k"),
            value: Some(b"v"),
            timestamp_ms: 9,
            delivery_count: Some(3),
        });
        assert_eq!(s, "t/2@7 k=v (9) #3 100%\t.");
    }

    #[test]
    fn refuses_unknown_tokens() {
        assert!(Format::parse("%x").is_err());
        assert!(Format::parse("abc%").is_err());
        assert_eq!(
            Format::parse("%v").unwrap().render(&Fields {
                topic: "",
                partition: 0,
                offset: 0,
                key: None,
                value: Some(b"x"),
                timestamp_ms: 0,
                delivery_count: None,
            }),
            "x"
        );
        let tombstone = Fields {
            topic: "",
            partition: 0,
            offset: 0,
            key: Some(b"k"),
            value: None,
            timestamp_ms: 0,
            delivery_count: None,
        };
        assert_eq!(Format::parse("%k=%v").unwrap().render(&tombstone), "k=");
    }
}
