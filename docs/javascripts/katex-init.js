// Render the math that pymdownx.arithmatex leaves in the page, with the KaTeX copy served by the site.
function renderBookMath() {
  for (const element of document.querySelectorAll(".arithmatex")) {
    renderMathInElement(element, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: false,
    });
  }
}

if (typeof document$ !== "undefined") {
  document$.subscribe(renderBookMath);  // Material's page-load stream (instant navigation too)
} else {
  document.addEventListener("DOMContentLoaded", renderBookMath);
}
