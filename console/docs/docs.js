/* global Scalar */
// The API reference at /docs/: Scalar rendering the Worker's own /openapi.json. What Scalar would
// fetch from scalar.com is turned off (its default fonts, its request proxy, its AI agent, which
// reads a registry of other APIs), so the page loads nothing from anywhere but this Worker, and
// "Test request" goes straight to it.
Scalar.createApiReference("#reference", {
  url: "/openapi.json",
  withDefaultFonts: false,
  agent: { disabled: true },
  // Its developer toolbar offers to deploy the document to scalar.com: not for this page.
  showDeveloperTools: "never",
  metaData: { title: "Flow coordinator API reference" },
});
