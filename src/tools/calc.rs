//! `calculate`: a small arithmetic evaluator (no variables, no side effects).
//!
//! Grammar: `expr := term (('+'|'-') term)*`, `term := unary (('*'|'/'|'%') unary)*`,
//! `unary := ('-'|'+') unary | power`, `power := atom (('^'|'**') unary)?`,
//! `atom := number | '(' expr ')' | func '(' expr ')'` with the functions
//! `sqrt`, `abs`, `floor`, `ceil`, `round`, `ln`, `log10`, `exp`, `sin`, `cos`, `tan`
//! and the constants `pi` and `e`.

/// Evaluates an arithmetic expression. Errors name the position.
pub fn evaluate(expr: &str) -> Result<f64, String> {
    if expr.len() > 10_000 {
        return Err("expression is longer than 10000 characters".into());
    }
    let mut p = Parser { s: expr.as_bytes(), i: 0, depth: 0 };
    let v = p.expr()?;
    p.ws();
    if p.i != p.s.len() {
        return Err(format!("unexpected `{}` at position {}", p.s[p.i] as char, p.i));
    }
    if !v.is_finite() {
        return Err("result is not a finite number".into());
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && (self.s[self.i] == b' ' || self.s[self.i] == b'\t') {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn enter(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > 200 { Err("expression is nested too deeply".into()) } else { Ok(()) }
    }

    fn expr(&mut self) -> Result<f64, String> {
        self.enter()?;
        let mut v = self.term()?;
        while let Some(c @ (b'+' | b'-')) = self.peek() {
            self.i += 1;
            let r = self.term()?;
            v = if c == b'+' { v + r } else { v - r };
        }
        self.depth -= 1;
        Ok(v)
    }

    fn term(&mut self) -> Result<f64, String> {
        let mut v = self.unary()?;
        loop {
            match self.peek() {
                Some(b'*') if self.s.get(self.i + 1) != Some(&b'*') => {
                    self.i += 1;
                    v *= self.unary()?;
                }
                Some(b'/') => {
                    self.i += 1;
                    let r = self.unary()?;
                    if r == 0.0 {
                        return Err("division by zero".into());
                    }
                    v /= r;
                }
                Some(b'%') => {
                    self.i += 1;
                    let r = self.unary()?;
                    if r == 0.0 {
                        return Err("modulo by zero".into());
                    }
                    v %= r;
                }
                _ => return Ok(v),
            }
        }
    }

    fn unary(&mut self) -> Result<f64, String> {
        self.enter()?;
        let v = match self.peek() {
            Some(b'-') => {
                self.i += 1;
                -self.unary()?
            }
            Some(b'+') => {
                self.i += 1;
                self.unary()?
            }
            _ => self.power()?,
        };
        self.depth -= 1;
        Ok(v)
    }

    fn power(&mut self) -> Result<f64, String> {
        let base = self.atom()?;
        match self.peek() {
            Some(b'^') => {
                self.i += 1;
                Ok(base.powf(self.unary()?))
            }
            Some(b'*') if self.s.get(self.i + 1) == Some(&b'*') => {
                self.i += 2;
                Ok(base.powf(self.unary()?))
            }
            _ => Ok(base),
        }
    }

    fn atom(&mut self) -> Result<f64, String> {
        match self.peek() {
            Some(b'(') => {
                self.i += 1;
                let v = self.expr()?;
                self.close()?;
                Ok(v)
            }
            Some(c) if c.is_ascii_digit() || c == b'.' => self.number(),
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.i;
                while self.i < self.s.len() && (self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == b'_') {
                    self.i += 1;
                }
                let name = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
                match name {
                    "pi" => return Ok(std::f64::consts::PI),
                    "e" => return Ok(std::f64::consts::E),
                    _ => {}
                }
                let f: fn(f64) -> f64 = match name {
                    "sqrt" => f64::sqrt,
                    "abs" => f64::abs,
                    "floor" => f64::floor,
                    "ceil" => f64::ceil,
                    "round" => f64::round,
                    "ln" => f64::ln,
                    "log10" => f64::log10,
                    "exp" => f64::exp,
                    "sin" => f64::sin,
                    "cos" => f64::cos,
                    "tan" => f64::tan,
                    _ => return Err(format!("unknown name `{name}` at position {start}")),
                };
                if self.peek() != Some(b'(') {
                    return Err(format!("`{name}` needs parentheses at position {}", self.i));
                }
                self.i += 1;
                let v = self.expr()?;
                self.close()?;
                Ok(f(v))
            }
            Some(c) => Err(format!("unexpected `{}` at position {}", c as char, self.i)),
            None => Err("unexpected end of expression".into()),
        }
    }

    fn close(&mut self) -> Result<(), String> {
        if self.peek() == Some(b')') {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected `)` at position {}", self.i))
        }
    }

    fn number(&mut self) -> Result<f64, String> {
        let start = self.i;
        while self.i < self.s.len() && (self.s[self.i].is_ascii_digit() || self.s[self.i] == b'.') {
            self.i += 1;
        }
        if self.i < self.s.len() && (self.s[self.i] == b'e' || self.s[self.i] == b'E') {
            let save = self.i;
            self.i += 1;
            if self.i < self.s.len() && (self.s[self.i] == b'+' || self.s[self.i] == b'-') {
                self.i += 1;
            }
            if self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
                    self.i += 1;
                }
            } else {
                self.i = save;
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("");
        text.parse::<f64>().map_err(|_| format!("bad number `{text}` at position {start}"))
    }
}

#[cfg(test)]
mod tests {
    use super::evaluate;

    #[test]
    fn arithmetic() {
        assert_eq!(evaluate("2+3*4").unwrap(), 14.0);
        assert_eq!(evaluate("(2+3)*4").unwrap(), 20.0);
        assert_eq!(evaluate("-2^2").unwrap(), -4.0);
        assert_eq!(evaluate("2**3**2").unwrap(), 512.0);
        assert_eq!(evaluate("7 % 3").unwrap(), 1.0);
        assert_eq!(evaluate("sqrt(16) + abs(-1)").unwrap(), 5.0);
        assert_eq!(evaluate("1.5e2").unwrap(), 150.0);
        assert!((evaluate("pi").unwrap() - std::f64::consts::PI).abs() < 1e-12);
        assert!(evaluate("1/0").unwrap_err().contains("division by zero"));
        assert!(evaluate("2+").is_err());
        assert!(evaluate("foo(1)").unwrap_err().contains("`foo`"));
        assert!(evaluate("(1").is_err());
        assert!(evaluate("1 1").is_err());
        assert!(evaluate(&"(".repeat(10_000)).is_err());
        assert!(evaluate("10^400").is_err());
    }
}
