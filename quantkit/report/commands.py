"""Commands in the HTML report: each in a wrapped code block with a copy button (no line runs off a phone's screen).

The button copies the command's text with the Clipboard API where the page may use it (a file opened from disk
usually may); otherwise it selects the text so the reader can copy it by hand. Deterministic markup, no external code.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

COPY_JS = """
(function () {
  document.querySelectorAll("button.copy").forEach(function (b) {
    b.addEventListener("click", function () {
      var code = b.parentNode.querySelector("pre"), text = code.textContent;
      var done = function () { b.textContent = "Copied"; setTimeout(function () { b.textContent = "Copy"; }, 1500); };
      var select = function () { var r = document.createRange(); r.selectNodeContents(code); var s = window.getSelection();
        s.removeAllRanges(); s.addRange(r); b.textContent = "Selected: press Ctrl+C"; };
      if (navigator.clipboard && window.isSecureContext) { navigator.clipboard.writeText(text).then(done, select); } else { select(); }
    });
  });
})();
"""


def command_blocks(commands: Sequence[str]) -> Markup:
    """One ``<div class="cmd">`` per command: the command in a wrapping ``<pre>`` and a Copy button (escaped)."""
    return Markup("").join(Markup('<div class="cmd"><pre>{}</pre><button type="button" class="copy" aria-label="Copy this command">Copy</button></div>')
                           .format(escape(c)) for c in commands)


__all__ = ["COPY_JS", "command_blocks"]
