"""dpmbench.table: Markdown tables and number formatting."""


def fmt_num(x):
    """Three significant-ish digits: 1234, 12.3, 1.23; "" for None."""
    if x is None:
        return ""
    if abs(x) >= 100:
        return "%.0f" % x
    if abs(x) >= 10:
        return "%.1f" % x
    return "%.2f" % x


def spread_text(values, unit=""):
    """'median (min–max)unit' of a sample list, or ""."""
    if not values:
        return ""
    s = sorted(values)
    n = len(s)
    med = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return "%s (%s–%s)%s" % (fmt_num(med), fmt_num(s[0]), fmt_num(s[-1]), unit)


def ratio_text(r, interval=True):
    """A stats.Ratio as table text ("" for None)."""
    return r.text(interval) if r is not None else ""


def markdown(heads, rows):
    """A Markdown table (a string ending in a newline); cells may be any
    value (str() is taken); "" for no rows."""
    if not rows:
        return ""
    rows = [[str(c) for c in r] for r in rows]
    heads = [str(h) for h in heads]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]

    def line(cols):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths)) + " |"
    return "\n".join([line(heads), line(["-" * w for w in widths])]
                     + [line(r) for r in rows]) + "\n"


def markdown_print(heads, rows):
    """Print markdown(heads, rows) and a blank line."""
    text = markdown(heads, rows)
    if text:
        print(text)
