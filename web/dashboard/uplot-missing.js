// Stands in for uPlot when the npm package was not installed at build time (src/router/CMakeLists.txt): it
// defines nothing, and dashboard.js shows its tables and says that the charts are unavailable.
