"""The seed's tables (output_1..4) as JSON and CSV: cells made safe (`cells`), msprobe's column names (`columns`),
the writer (`writer`), output_3's rows from the columnar target table (`values`) with the element-wise columns
(`tensorcolumns`), and a table shared by two processes (`splittable`)."""
