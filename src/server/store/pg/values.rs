//! SQLite's five storage classes as PostgreSQL values, both ways: the parameters the
//! store binds (`?N` values) and the columns it reads back, whatever PostgreSQL type the
//! schema gave them (integers, booleans, numerics, text, bytea).

use bytes::{BufMut, BytesMut};
use rusqlite::types::Value;
use tokio_postgres::types::{FromSql, IsNull, Kind, ToSql, Type, to_sql_checked};

pub(super) fn kind_letter(v: &Value) -> char {
    match v {
        Value::Null => 'n',
        Value::Integer(_) => 'i',
        Value::Real(_) => 'r',
        Value::Text(_) => 't',
        Value::Blob(_) => 'b',
    }
}

/// The parameter type a value asks for; a NULL's is left to the server (oid 0).
pub(super) fn param_type(v: &Value) -> Type {
    match v {
        Value::Null => Type::new("unknown".into(), 0, Kind::Pseudo, "pg_catalog".into()),
        Value::Integer(_) => Type::INT8,
        Value::Real(_) => Type::FLOAT8,
        Value::Text(_) => Type::TEXT,
        Value::Blob(_) => Type::BYTEA,
    }
}

pub(super) fn params(values: &[Value]) -> Vec<PgParam<'_>> {
    values.iter().map(PgParam).collect()
}

/// A value bound to whatever type the server settled on for its parameter.
#[derive(Debug)]
pub(super) struct PgParam<'a>(&'a Value);

type BoxError = Box<dyn std::error::Error + Sync + Send>;

impl ToSql for PgParam<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        match (self.0, ty) {
            (Value::Null, _) => Ok(IsNull::Yes),
            (Value::Integer(i), t) if *t == Type::INT8 => i.to_sql(t, out),
            (Value::Integer(i), t) if *t == Type::INT4 => i32::try_from(*i)?.to_sql(t, out),
            (Value::Integer(i), t) if *t == Type::INT2 => i16::try_from(*i)?.to_sql(t, out),
            (Value::Integer(i), t) if *t == Type::BOOL => (*i != 0).to_sql(t, out),
            (Value::Integer(i), t) if *t == Type::FLOAT8 => (*i as f64).to_sql(t, out),
            (Value::Integer(i), t) if is_text(t) => i.to_string().as_str().to_sql(&Type::TEXT, out),
            (Value::Real(f), t) if *t == Type::FLOAT8 => f.to_sql(t, out),
            (Value::Real(f), t) if *t == Type::FLOAT4 => (*f as f32).to_sql(t, out),
            (Value::Text(s), t) if *t == Type::JSONB => {
                out.put_u8(1);
                out.put_slice(s.as_bytes());
                Ok(IsNull::No)
            }
            (Value::Text(s), t) if is_text(t) || *t == Type::JSON => {
                out.put_slice(s.as_bytes());
                Ok(IsNull::No)
            }
            (Value::Blob(b), t) if *t == Type::BYTEA => {
                out.put_slice(b);
                Ok(IsNull::No)
            }
            (v, t) => Err(format!("cannot pass {v:?} as a PostgreSQL {t}").into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

fn is_text(t: &Type) -> bool {
    [
        Type::TEXT,
        Type::VARCHAR,
        Type::BPCHAR,
        Type::NAME,
        Type::UNKNOWN,
    ]
    .contains(t)
}

/// A column's value as SQLite's storage class.
pub(super) struct PgValue(pub(super) Value);

impl<'a> FromSql<'a> for PgValue {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<PgValue, BoxError> {
        let v = match ty {
            t if *t == Type::INT8 => Value::Integer(i64::from_sql(t, raw)?),
            t if *t == Type::INT4 => Value::Integer(i32::from_sql(t, raw)?.into()),
            t if *t == Type::INT2 => Value::Integer(i16::from_sql(t, raw)?.into()),
            t if *t == Type::OID => Value::Integer(u32::from_sql(t, raw)?.into()),
            t if *t == Type::BOOL => Value::Integer(bool::from_sql(t, raw)?.into()),
            t if *t == Type::FLOAT8 => Value::Real(f64::from_sql(t, raw)?),
            t if *t == Type::FLOAT4 => Value::Real(f32::from_sql(t, raw)?.into()),
            t if *t == Type::NUMERIC => numeric(raw)?,
            t if *t == Type::BYTEA => Value::Blob(raw.to_vec()),
            t if *t == Type::JSONB => {
                Value::Text(std::str::from_utf8(raw.get(1..).unwrap_or_default())?.to_owned())
            }
            t if is_text(t) || *t == Type::JSON || *t == Type::CHAR => {
                Value::Text(std::str::from_utf8(raw)?.to_owned())
            }
            t => {
                return Err(
                    format!("a column of PostgreSQL type {t} (the store reads none)").into(),
                );
            }
        };
        Ok(PgValue(v))
    }

    fn from_sql_null(_: &Type) -> Result<PgValue, BoxError> {
        Ok(PgValue(Value::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// A NUMERIC (what SUM of bigints gives) in binary form: an integer when it has no
/// fraction and fits, else a float.
fn numeric(raw: &[u8]) -> Result<Value, BoxError> {
    let word = |i: usize| -> Result<i16, BoxError> {
        let b = raw.get(i * 2..i * 2 + 2).ok_or("a short NUMERIC")?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    };
    let (ndigits, weight, sign, scale) = (word(0)?, word(1)?, word(2)? as u16, word(3)?);
    if sign == 0xC000 {
        return Ok(Value::Real(f64::NAN));
    }
    let mut whole: i128 = 0;
    let mut value = 0f64;
    let mut exact = true;
    for i in 0..ndigits.max(0) as usize {
        let digit = word(4 + i)?;
        let power = i32::from(weight) - i as i32;
        value += f64::from(digit) * 10_000f64.powi(power);
        if power >= 0 {
            whole = whole
                .checked_mul(10_000)
                .and_then(|w| w.checked_add(digit.into()))
                .ok_or("a NUMERIC too big")?;
        } else if digit != 0 {
            exact = false;
        }
    }
    // Trailing base-10000 zeros that the digits left out.
    let last_power = i32::from(weight) - i32::from(ndigits) + 1;
    for _ in 0..last_power.max(0) {
        whole = whole.checked_mul(10_000).ok_or("a NUMERIC too big")?;
    }
    let negative = sign == 0x4000;
    if exact
        && scale >= 0
        && let Ok(w) = i64::try_from(if negative { -whole } else { whole })
    {
        return Ok(Value::Integer(w));
    }
    Ok(Value::Real(if negative { -value } else { value }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric_bytes(weight: i16, sign: u16, scale: i16, digits: &[i16]) -> Vec<u8> {
        let mut out = Vec::new();
        for w in [digits.len() as i16, weight, sign as i16, scale] {
            out.extend(w.to_be_bytes());
        }
        for d in digits {
            out.extend(d.to_be_bytes());
        }
        out
    }

    #[test]
    fn numerics_read_as_integers_when_whole() {
        // 123456789 = 1 2345 6789 (weight 2)
        assert_eq!(
            numeric(&numeric_bytes(2, 0, 0, &[1, 2345, 6789])).unwrap(),
            Value::Integer(123_456_789)
        );
        // 50000 = 5 0000, stored as [5] with weight 1
        assert_eq!(
            numeric(&numeric_bytes(1, 0, 0, &[5])).unwrap(),
            Value::Integer(50_000)
        );
        assert_eq!(
            numeric(&numeric_bytes(0, 0x4000, 0, &[7])).unwrap(),
            Value::Integer(-7)
        );
        assert_eq!(
            numeric(&numeric_bytes(0, 0, 0, &[])).unwrap(),
            Value::Integer(0)
        );
        // 1.5 = 1 . 5000
        assert_eq!(
            numeric(&numeric_bytes(0, 0, 1, &[1, 5000])).unwrap(),
            Value::Real(1.5)
        );
    }
}
