// memsafe ui: small progressive enhancements. The page works without this file.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // "/" focuses the search box
  const search = document.querySelector("input[type=search]");
  document.addEventListener("keydown", (e) => {
    const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement.tagName);
    if (e.key === "/" && search && !typing) { e.preventDefault(); search.focus(); search.select(); }
  });
  // selects that submit their form when changed
  for (const el of document.querySelectorAll("[data-autosubmit]")) {
    el.addEventListener("change", () => el.form.requestSubmit());
  }
  // purge: the button stays disabled until the confirmation is typed (the server checks it too)
  for (const input of document.querySelectorAll("input[data-expect]")) {
    const button = input.form.querySelector("[data-needs-confirm]");
    const check = () => {
      button.disabled = input.value.trim().replace(/\s+/g, " ").toLowerCase() !== input.dataset.expect;
    };
    input.addEventListener("input", check);
    check();
  }
  // "Back" links on the error page
  for (const a of document.querySelectorAll("a[data-back]")) {
    a.addEventListener("click", (e) => { if (history.length > 1) { e.preventDefault(); history.back(); } });
  }
});
