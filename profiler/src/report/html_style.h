/* The look report.html and the live page (GET / of profiler.listen) share, so both read
 * the same way: the stylesheet and the sequential colour palette of their heat maps and
 * colour scales. The palette is an X-macro of hex digits so that C (report_html.c: numbers)
 * and the page's script (live_page.c: '#rrggbb' strings) are built from the one list. */
#ifndef MOE_REPORT_HTML_STYLE_H
#define MOE_REPORT_HTML_STYLE_H

/* ColorBrewer YlGnBu: a sequential palette that stays readable in grey and for the common
 * colour-vision deficiencies; light = little, dark = much. */
#define MOE_HTML_SEQ_PALETTE(X)                                                              \
    X(ffffd9) X(edf8b1) X(c7e9b4) X(7fcdbb) X(41b6c4) X(1d91c0) X(225ea8) X(253494) X(081d58)

#define MOE_HTML_CSS                                                                         \
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',Arial,"          \
    "sans-serif;color:#222;margin:0 auto;max-width:1240px;padding:16px 20px;background:#fff}\n" \
    "h1{font-size:22px;margin:4px 0 10px}h2{font-size:17px;margin:28px 0 2px}\n"            \
    "p.note{color:#555;font-size:13px;margin:2px 0 6px}\n"                                   \
    "table{border-collapse:collapse;font-size:13px}\n"                                       \
    "td,th{padding:3px 10px;text-align:left;border-bottom:1px solid #e4e4e4;"                \
    "vertical-align:top}\n"                                                                  \
    "th{background:#f4f4f4}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}\n" \
    ".partial{background:#fde2e1;border:2px solid #c0392b;color:#7b1d13;padding:10px 14px;"  \
    "font-weight:600;margin:10px 0}\n"                                                       \
    ".findings li{margin:5px 0}\n"                                                           \
    "svg{display:block;max-width:100%;height:auto;margin:6px 0 0}\n"                         \
    "svg text{font-size:12px;fill:#333}svg .grid{stroke:#e6e6e6}svg .axis{stroke:#888}\n"    \
    "svg text.in{font-size:11px}svg text.dark{fill:#fff}\n"                                  \
    "span.chip{display:inline-block;padding:1px 5px;margin:1px 2px;border-radius:3px;"        \
    "border:1px solid #ddd;font-size:12px;font-variant-numeric:tabular-nums}\n"               \
    "span.chip.dark{color:#fff}h3{font-size:15px;margin:18px 0 2px}\n"                        \
    "footer{color:#666;font-size:12px;margin:30px 0 10px}\n"

#endif /* MOE_REPORT_HTML_STYLE_H */
