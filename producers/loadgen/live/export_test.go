package live

// Fit is fit, for the tests of the bar's width.
var Fit = fit
