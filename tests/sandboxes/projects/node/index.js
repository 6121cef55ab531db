const isNumber = require("is-number");

exports.add = (a, b) => {
  if (!isNumber(a) || !isNumber(b)) throw new TypeError('numbers only');
  return a - b;
};
